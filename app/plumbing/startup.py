"""Checks every process runs once before it serves: gunicorn's master, ``python -m workers``
and ``flask --app wsgi ...``.

A bad setting or, in production, an unreachable database stops the process with one
line on stderr and a non-zero status, instead of a traceback (or, under gunicorn, a
master respawning workers that each fail the same way).
"""
from __future__ import annotations

import sys
from typing import NoReturn

from app.plumbing import config as app_config


class StartupError(Exception):
    """A one-line reason not to start."""


def check(env=None, reach_database: bool | None = None) -> dict:
    """The finalized settings, or StartupError. ``reach_database`` defaults to production only:
    elsewhere a process may start before its database (tests, a laptop)."""
    try:
        settings = app_config.finalize(app_config.load_settings(env))
        app_config.check_production(settings)
    except app_config.ConfigError as exc:
        raise StartupError(str(exc)) from None
    if reach_database is None:
        reach_database = settings["APP_ENV"] == "production"
    if reach_database:
        from app.plumbing.db import DatabaseUnreachable, check_reachable
        try:
            check_reachable(settings["DATABASE_URL"])
        except DatabaseUnreachable as exc:
            raise StartupError(str(exc)) from None
    return settings


def exit_with(message: str, status: int = 1, env=None) -> NoReturn:
    print(app_config.startup_error_line(message, env), file=sys.stderr, flush=True)
    raise SystemExit(status)


def check_or_exit(env=None, status: int = 1, reach_database: bool | None = None) -> dict:
    try:
        return check(env, reach_database)
    except StartupError as exc:
        exit_with(str(exc), status, env)
