"""What gunicorn does on its own, before the application sees a request, made to keep the
service's promises: gunicorn.conf.py wires both.

- ``write_json_error``: the requests gunicorn refuses itself (a request line over
  ``limit_request_line``, more than ``limit_request_fields`` headers, a malformed request
  line, version or header...) are answered in the API's JSON error envelope, with a request
  id, instead of gunicorn's HTML page. gunicorn has no hook or setting for that answer: its
  workers call ``gunicorn.util.write_error``, which ``install_json_errors`` replaces (and a
  test in tests/ops checks against the gunicorn installed). gunicorn's own message may quote
  the request line, query string included: it is never sent, a fixed sentence is.
- ``QuerylessLogger`` (the ``logger_class``): no access or error line carries a query
  string, which can hold a target (personal data): the request line, the Referer and every
  message are written without theirs.
"""
from __future__ import annotations

import json
import re
import secrets

from gunicorn import glogging, util

# What gunicorn refuses itself: its statuses (gunicorn.workers.base.Worker.handle_error).
REFUSALS = {
    400: ("invalid_request", "the request is malformed"),
    403: ("forbidden", "the request is not allowed"),
    414: ("uri_too_long", "the request URL is too long"),
    417: ("expectation_failed", "the Expect header is not supported"),
    431: ("headers_too_large", "the request headers are too large or too many"),
    500: ("internal_error", "an unexpected error occurred; it has been logged"),
    501: ("not_implemented", "this request feature is not supported"),
}
QUERY_RE = re.compile(r"\?[^\s'\"]*")


def json_error(status: int, reason: str) -> bytes:
    """The whole HTTP/1.1 answer to a request gunicorn refused."""
    error, message = REFUSALS.get(status, ("http_error", "the request could not be served"))
    request_id = f"req_{secrets.token_hex(12)}"
    body = json.dumps({"ok": False, "error": error, "message": message, "request_id": request_id}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Request-Id: {request_id}\r\nX-Content-Type-Options: nosniff\r\n"
            "Cache-Control: no-store\r\n\r\n")
    return head.encode("latin-1") + body


def write_json_error(sock, status_int, reason, mesg):  # gunicorn.util.write_error's signature
    util.write_nonblock(sock, json_error(int(status_int), reason))


def install_json_errors() -> None:
    util.write_error = write_json_error


def without_query(text: str) -> str:
    return QUERY_RE.sub("?[query withheld]", text)


class QuerylessLogger(glogging.Logger):
    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        atoms["q"] = atoms["{query_string}e"] = "-"
        for name, value in atoms.items():
            if isinstance(value, str) and "?" in value:
                atoms[name] = without_query(value)
        return atoms

    def _log(self, method, msg, args, kwargs):
        text = str(msg) % args if args else str(msg)
        method(without_query(text), **kwargs)

    def critical(self, msg, *args, **kwargs):
        self._log(self.error_log.critical, msg, args, kwargs)

    def error(self, msg, *args, **kwargs):
        self._log(self.error_log.error, msg, args, kwargs)

    def warning(self, msg, *args, **kwargs):
        self._log(self.error_log.warning, msg, args, kwargs)

    def info(self, msg, *args, **kwargs):
        self._log(self.error_log.info, msg, args, kwargs)

    def debug(self, msg, *args, **kwargs):
        self._log(self.error_log.debug, msg, args, kwargs)

    def exception(self, msg, *args, **kwargs):
        self._log(self.error_log.exception, msg, args, kwargs)
