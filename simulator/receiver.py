"""Simulated customer webhook receivers (E4).

- ``POST /_sim/receivers/<name>`` ``{"secret": str, "responses": [int, ...], "delay_ms": int,
  "redirect_to": str}`` creates the receiver (201) or resets it (200), clearing its deliveries.
  ``"secrets": [str, ...]`` instead of ``secret`` gives it several secrets, as a receiver
  holds during a secret rotation (D16): a signature verifies when any of them signs it.
  ``responses`` (default ``[200]``) are answered in order, the last one repeated; a 3xx entry
  answers with ``Location`` pointing at ``/_sim/hooks/<redirect_to>`` (default
  ``<name>-redirected``), so a test can see whether the sender followed it.
- ``POST /_sim/hooks/<name>`` records the delivery, waits ``delay_ms``, then answers.
- ``GET /_sim/receivers/<name>/deliveries`` → ``{"deliveries": [...]}``, oldest first, each
  ``{"received_at", "received_at_ms", "headers", "body", "signature_valid",
  "webhook_signature_valid", "response_status"}``: ``signature_valid`` is the check of
  ``X-Service-Signature`` (§6.3), ``webhook_signature_valid`` the Standard Webhooks check of
  ``webhook-id``/``webhook-timestamp``/``webhook-signature`` (D16: a ``v1,`` entry signed by
  one of the secrets, a timestamp within 5 minutes). Both compare in constant time.

- ``POST /_sim/hec/<name>/services/collector/event``: the receiver as a Splunk HTTP Event
  Collector, its ``secret`` the HEC token. ``Authorization: Splunk TOKEN`` is checked in constant
  time (401 ``{"text": "Invalid token", "code": 4}`` otherwise, the batch not taken); the body's
  concatenated JSON objects are parsed (400 ``{"code": 6}`` when one is not an object with an
  ``event``) and recorded with the delivery as ``events``, ``token_valid`` beside them.

A delivery is recorded when it arrives, before the delay, so a sender that gives up waiting
has still delivered it, as with a real slow receiver.
"""
import base64
import binascii
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from flask import Blueprint, Response, current_app, jsonify, request

from simulator.errors import json_error

SIGNATURE_HEADER = "X-Service-Signature"
SIGNATURE_PREFIX = "sha256="
STANDARD_TOLERANCE_SECONDS = 5 * 60

receiver_bp = Blueprint("receiver", __name__)


def verify_signature(secret: str | list[str], raw_body: bytes, header_value: str | None) -> bool:
    """Whether ``header_value`` is ``sha256=`` + lowercase hex HMAC-SHA256(secret, raw_body),
    for ``secret`` or any of a list of secrets."""
    if not header_value:
        return False
    given = header_value.encode("utf-8")
    # Bytes, because compare_digest refuses non-ASCII str and a header may hold anything.
    return any(hmac.compare_digest(
        (SIGNATURE_PREFIX + hmac.new(s.encode("utf-8"), raw_body, hashlib.sha256).hexdigest()).encode("utf-8"), given)
        for s in ([secret] if isinstance(secret, str) else secret))


def standard_key(secret: str) -> bytes:
    """The Standard Webhooks HMAC key: the base64-decoded part after ``whsec_`` (D16); a secret
    of another form is used as its UTF-8 bytes."""
    if secret.startswith("whsec_"):
        encoded = secret[len("whsec_"):].rstrip("=")
        try:
            return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            pass
    return secret.encode("utf-8")


def standard_signature(secret: str, msg_id: str, timestamp: str, raw_body: bytes) -> str:
    """``v1,`` + base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` keyed with ``standard_key``."""
    signed = f"{msg_id}.{timestamp}.".encode() + raw_body
    return "v1," + base64.b64encode(hmac.new(standard_key(secret), signed, hashlib.sha256).digest()).decode()


def _header(headers, name: str) -> str | None:
    """A header of a request's headers or of a recorded plain dict, by name in any case."""
    value = headers.get(name)
    if value is None and isinstance(headers, dict):
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def standard_signed_by(secrets: list[str], raw_body: bytes, headers) -> list[bool]:
    """For each secret, whether ``webhook-signature`` holds its entry (space-separated ``v1,`` entries)."""
    msg_id, timestamp = _header(headers, "webhook-id"), _header(headers, "webhook-timestamp")
    entries = (_header(headers, "webhook-signature") or "").split()
    if not msg_id or not timestamp:
        return [False for _ in secrets]
    return [any(hmac.compare_digest(standard_signature(s, msg_id, timestamp, raw_body).encode("utf-8"),
                                    entry.encode("utf-8")) for entry in entries) for s in secrets]


def verify_standard(secrets: list[str], raw_body: bytes, headers, now: float | None = None) -> bool:
    """Whether a ``v1,`` entry of ``webhook-signature`` is signed by one of ``secrets`` and
    ``webhook-timestamp`` (Unix seconds) is within 5 minutes of now."""
    timestamp = _header(headers, "webhook-timestamp") or ""
    if not timestamp.isascii() or not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > STANDARD_TOLERANCE_SECONDS:
        return False
    return any(standard_signed_by(secrets, raw_body, headers))


@dataclass
class Receiver:
    secrets: list[str]
    responses: list[int]
    delay_ms: int
    redirect_to: str
    deliveries: list[dict] = field(default_factory=list)

    def next_status(self) -> int:
        return self.responses[min(len(self.deliveries), len(self.responses) - 1)]


class ReceiverRegistry:
    """All receivers by name; one lock, as the server is threaded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.receivers: dict[str, Receiver] = {}


class InvalidConfig(ValueError):
    """A receiver configuration refused with 400."""


@receiver_bp.record_once
def _install_registry(state) -> None:
    state.app.extensions["sim_receivers"] = ReceiverRegistry()


def registry() -> ReceiverRegistry:
    return current_app.extensions["sim_receivers"]


@receiver_bp.errorhandler(InvalidConfig)
def _invalid_config(exc: InvalidConfig):
    return json_error(400, "invalid_request", str(exc))


@receiver_bp.post("/_sim/receivers/<name>")
def configure(name: str):
    receiver = _parse_config(name, request.get_json(silent=True))
    with registry().lock:
        existed = name in registry().receivers
        registry().receivers[name] = receiver
    return jsonify({
        "name": name,
        "hook_url": _hook_url(name),
        "responses": receiver.responses,
        "delay_ms": receiver.delay_ms,
        "redirect_to": receiver.redirect_to,
    }), 200 if existed else 201


@receiver_bp.post("/_sim/hooks/<name>")
def hook(name: str):
    raw_body = request.get_data(cache=True)
    received_ms = int(time.time() * 1000)
    with registry().lock:
        receiver = registry().receivers.get(name)
        if receiver is None:
            return json_error(404, "unknown_receiver", f"No receiver named {name!r}.")
        status = receiver.next_status()
        receiver.deliveries.append({
            "received_at": _iso_ms(received_ms),
            "received_at_ms": received_ms,
            "headers": dict(request.headers),
            "body": raw_body.decode("utf-8", errors="replace"),
            "signature_valid": verify_signature(receiver.secrets, raw_body, request.headers.get(SIGNATURE_HEADER)),
            "webhook_signature_valid": verify_standard(receiver.secrets, raw_body, request.headers),
            "response_status": status,
        })
        delay_ms, redirect_to = receiver.delay_ms, receiver.redirect_to
    if delay_ms:
        time.sleep(delay_ms / 1000)
    return _answer(status, redirect_to)


def hec_events(raw_body: bytes) -> list[dict] | None:
    """The objects of a HEC body (JSON objects one after another, whitespace between allowed), or
    None when it is not one."""
    text, decoder, events, at = raw_body.decode("utf-8", errors="replace"), json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return events or None
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        if not isinstance(value, dict) or "event" not in value:
            return None
        events.append(value)


@receiver_bp.post("/_sim/hec/<name>/services/collector/event")
def hec(name: str):
    raw_body = request.get_data(cache=True)
    received_ms = int(time.time() * 1000)
    given = (request.headers.get("Authorization") or "").encode("utf-8")
    with registry().lock:
        receiver = registry().receivers.get(name)
        if receiver is None:
            return json_error(404, "unknown_receiver", f"No receiver named {name!r}.")
        token_valid = any(hmac.compare_digest(f"Splunk {s}".encode(), given) for s in receiver.secrets)
        events = hec_events(raw_body) if token_valid else None
        status = receiver.next_status() if events is not None else (400 if token_valid else 401)
        receiver.deliveries.append({
            "received_at": _iso_ms(received_ms), "received_at_ms": received_ms, "headers": dict(request.headers),
            "body": raw_body.decode("utf-8", errors="replace"), "token_valid": token_valid,
            "events": events or [], "response_status": status,
        })
        delay_ms = receiver.delay_ms
    if delay_ms:
        time.sleep(delay_ms / 1000)
    if status == 401:
        return jsonify({"text": "Invalid token", "code": 4}), 401
    if status == 400:
        return jsonify({"text": "Invalid data format", "code": 6}), 400
    return jsonify({"text": "Success" if status < 300 else "Error", "code": 0 if status < 300 else 9}), status


@receiver_bp.get("/_sim/receivers/<name>/deliveries")
def deliveries(name: str):
    with registry().lock:
        receiver = registry().receivers.get(name)
        if receiver is None:
            return json_error(404, "unknown_receiver", f"No receiver named {name!r}.")
        return jsonify({"deliveries": list(receiver.deliveries)})


def _parse_config(name: str, body) -> Receiver:
    if not isinstance(body, dict):
        raise InvalidConfig("the body must be a JSON object")
    if "secret" in body and "secrets" in body:
        raise InvalidConfig("give secret or secrets, not both")
    secrets = body["secrets"] if "secrets" in body else [body.get("secret", "")]
    responses = body.get("responses", [200])
    delay_ms = body.get("delay_ms", 0)
    redirect_to = body.get("redirect_to", f"{name}-redirected")
    if not isinstance(secrets, list) or not secrets or not all(isinstance(s, str) for s in secrets):
        raise InvalidConfig("secret must be a string, secrets a non-empty list of strings")
    if not isinstance(responses, list) or not responses or not all(_is_status(r) for r in responses):
        raise InvalidConfig("responses must be a non-empty list of HTTP statuses 200 to 599")
    if not _is_int(delay_ms) or delay_ms < 0:
        raise InvalidConfig("delay_ms must be a non-negative integer")
    if not isinstance(redirect_to, str) or not redirect_to or "/" in redirect_to:
        raise InvalidConfig("redirect_to must be a receiver name")
    return Receiver(secrets=secrets, responses=responses, delay_ms=delay_ms, redirect_to=redirect_to)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_status(value) -> bool:
    return _is_int(value) and 200 <= value <= 599


def _answer(status: int, redirect_to: str) -> Response:
    if status in (204, 304):
        return Response(status=status)
    response = jsonify({"status": status})
    response.status_code = status
    if 300 <= status < 400:
        response.headers["Location"] = _hook_url(redirect_to)
    return response


def _hook_url(name: str) -> str:
    return f"{request.host_url}_sim/hooks/{name}"


def _iso_ms(unix_ms: int) -> str:
    """ISO 8601 UTC with milliseconds, e.g. ``2025-01-31T12:00:00.123Z``."""
    moment = datetime.fromtimestamp(unix_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{unix_ms % 1000:03d}Z"
