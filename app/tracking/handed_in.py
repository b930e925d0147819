"""What tracking is handed at start by the app (``app.create_app``), from a domain above it: the
watches' comparison of a finished watch scan with the watch's previous one (D28). The watches
stand above tracking, as they create their scans through intake, which uses tracking."""
from __future__ import annotations

from collections.abc import Callable

from app.plumbing.installed import Installed

WATCH_SCANS_FINISHED: Installed[Callable[[list], int]] = Installed("the watches' comparison of finished scans")
