"""Where webhooks may go (D11): the SSRF guard.

Outside development and test, a webhook URL must be ``https`` and its host must
resolve only to public addresses: loopback, private, link-local (which holds the
cloud metadata address 169.254.169.254), shared, reserved and multicast ranges are
refused. The check runs when a URL is saved and again for every connection, on the
addresses actually resolved then, so a DNS answer that changes after saving
(rebinding) is caught too.
"""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from app import runtime


class UnsafeWebhookUrl(ValueError):
    pass


def guard_enabled() -> bool:
    return runtime.config.get("APP_ENV") == "production"


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def resolve(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UnsafeWebhookUrl(f"the host {host!r} does not resolve") from exc
    return sorted({info[4][0] for info in infos})


def check_webhook_url(url: str, *, guard: bool | None = None) -> list[str]:
    """Raise ``UnsafeWebhookUrl`` unless ``url`` may receive webhooks; returns its addresses."""
    from app.services.accounts import AccountError

    if len(url) > 2048:
        raise AccountError("the webhook URL is longer than 2048 characters")
    parts = urlsplit(url)
    guard = guard_enabled() if guard is None else guard
    allowed = ("https",) if guard else ("http", "https")
    if parts.scheme not in allowed or not parts.hostname:
        raise AccountError(f"the webhook URL must be an absolute {' or '.join(allowed)} URL")
    if parts.username or parts.password:
        raise AccountError("the webhook URL must not carry credentials")
    if not guard:
        return []
    try:
        addresses = resolve(parts.hostname, parts.port or 443)
        bad = [a for a in addresses if not is_public(a)]
    except UnsafeWebhookUrl as exc:
        raise AccountError(str(exc)) from exc
    if bad:
        raise AccountError(f"the webhook URL resolves to a non-public address ({', '.join(bad)})")
    return addresses
