"""WSGI entry point: ``gunicorn wsgi:app`` and ``flask --app wsgi ...``.

A missing or malformed setting (or, in production, an unreachable database) stops the
process with one line naming it, not a traceback, so an operator sees at once what to
set. Under gunicorn the master has already checked the same settings
(gunicorn.conf.py); should a worker still fail here, it exits with gunicorn's "worker
failed to boot" status so that the master stops instead of respawning it for ever.
"""
import sys

from app import create_app
from app.startup import StartupError, check, exit_with

UNDER_GUNICORN = "gunicorn" in sys.modules
WORKER_BOOT_ERROR = 3  # gunicorn.arbiter.Arbiter.WORKER_BOOT_ERROR

try:
    # The gunicorn worker skips the database probe: its master made it at start, and a
    # database blip while a worker restarts must not stop the whole server.
    check(reach_database=False if UNDER_GUNICORN else None)
    app = create_app()
except StartupError as exc:
    exit_with(str(exc), WORKER_BOOT_ERROR if UNDER_GUNICORN else 1)
