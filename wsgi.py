"""WSGI entry point: ``gunicorn wsgi:app`` and ``flask --app wsgi ...``.

A missing or malformed setting (or, in production, an unreachable database) stops the
process with one line naming it, not a traceback, so an operator sees at once what to
set. Under gunicorn the master has already checked the same settings
(gunicorn.conf.py); should a worker still fail here, it exits with gunicorn's "worker
failed to boot" status so that the master stops instead of respawning it for ever.
"""
import os
import sys

UNDER_GUNICORN = "gunicorn" in sys.modules
if not UNDER_GUNICORN:
    # An operator command (``flask --app wsgi ...``) counts nothing worth scraping. Left in the
    # shared multiprocess folder, each one left two files there (2,900 a day from a cron job),
    # all read at every scrape. Removed before prometheus-client is imported, which reads it.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)

from app import create_app  # noqa: E402
from app.cli import is_operator_command  # noqa: E402
from app.plumbing.startup import StartupError, check, exit_with  # noqa: E402

WORKER_BOOT_ERROR = 3  # gunicorn.arbiter.Arbiter.WORKER_BOOT_ERROR

try:
    # The gunicorn worker skips the database probe: its master made it at start, and a
    # database blip while a worker restarts must not stop the whole server.
    check(reach_database=False if UNDER_GUNICORN else None)
    # An operator command builds the app without the API and the portal (a second, not nine).
    app = create_app(operator=not UNDER_GUNICORN and is_operator_command(sys.argv[1:]))
except StartupError as exc:
    exit_with(str(exc), WORKER_BOOT_ERROR if UNDER_GUNICORN else 1)
