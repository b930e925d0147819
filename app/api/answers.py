"""What the HTTP layer adds to a creation's answer: the address the service is reached at, the
URLs to poll, and the answer itself with its charge reported to the call's pipeline. Scans' and
watches' creations answer alike; SCIM builds its resources' locations on the same address."""
from __future__ import annotations

from flask import current_app, request

from app.api import hooks


def base_url() -> str:
    return current_app.config["PUBLIC_BASE_URL"] or request.host_url.rstrip("/")


def scan_url(scan_id: str) -> str:
    return f"{base_url()}/api/v1/scan/{scan_id}"


def with_poll_urls(body: dict) -> dict:
    """A creation's body with the URLs to poll, last in each object as the schemas order them."""
    if "bulk_id" in body:
        for entry in body["scans"]:
            entry["poll_url"] = scan_url(entry["scan_id"])
        body["aggregate_poll_url"] = f"{base_url()}/api/v1/scan/bulk/{body['bulk_id']}"
    else:
        body["poll_url"] = scan_url(body["scan_id"])
    return body


def created(outcome, report, *, waited: dict | None = None):
    """A creation's answer (``outcome``: a ``intake.creation.Outcome``, or a watch's alike): 202 with
    its own body and the URLs to poll, or (``waited``) 200 with the finished scan's read; and in the
    call's ``report`` what its admission charged and the activity entry it wrote with the charge. An
    ``Idempotency-Key`` replays the 202 either way: a replay reads nothing (the scan may have been
    erased since, the retrying key may not read)."""
    creation = hooks.render(with_poll_urls(outcome.body), 202)
    hooks.charged(report, balance=outcome.balance, usage=outcome.usage, limits=outcome.limits, credits=outcome.cost,
                  subject=outcome.subject, recorded=outcome.recorded,
                  stored=None if waited is None else (202, creation.get_data(as_text=True)))
    return creation if waited is None else hooks.render(waited, 200)
