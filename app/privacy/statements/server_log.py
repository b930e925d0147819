"""What the PostgreSQL server would write to its own log about this service's statements: the
settings that decide it, as this session (the service's role) sees them."""
from __future__ import annotations

from app.plumbing.db import execute


def settings(names: tuple[str, ...]) -> dict[str, str]:
    """``{name: setting}`` of the server settings ``names`` that exist on this server."""
    rows = execute("SELECT name, setting FROM pg_settings WHERE name = ANY(?::text[])", (list(names),)).fetchall()
    return dict(rows)
