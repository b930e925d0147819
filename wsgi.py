"""WSGI entry point: ``gunicorn wsgi:app`` and ``flask --app wsgi ...``.

A missing or malformed setting stops the process with one line naming it, not a
traceback, so an operator sees at once what to set.
"""
import sys

from app import create_app
from app.config import ConfigError

try:
    app = create_app()
except ConfigError as exc:
    print(f"error: {exc}", file=sys.stderr)
    raise SystemExit(1) from None
