"""Python client of the Public Scan API, and its command line (``python -m app.client``).

    from app.client import ScanClient, InsufficientBalance
    with ScanClient("https://api.example.com", "service_live_...") as api:
        scan = api.wait(api.create("jane.doe@example.com")["scan_id"])

See ``docs/client.md``.
"""
from app.client.client import DEFAULT_BASE_URL, FINAL_STATUSES, MAX_BULK_TARGETS, ScanClient, parse_rate_limit
from app.client.errors import (ApiError, AuthenticationError, Conflict, EngineUnavailable, Forbidden,
                               InsufficientBalance, NotFound, RateLimited, ScanClientError, ServerError,
                               ServiceUnavailable, TransportError, ValidationError, WaitTimeout)
# One implementation of the signature check (§6.3), shared with the service that signs.
from app.webhook_signature import SIGNATURE_HEADER
from app.webhook_signature import verify_signature as verify_webhook

__all__ = [
    "ScanClient", "parse_rate_limit", "verify_webhook", "SIGNATURE_HEADER",
    "DEFAULT_BASE_URL", "FINAL_STATUSES", "MAX_BULK_TARGETS",
    "ScanClientError", "ApiError", "ValidationError", "AuthenticationError", "InsufficientBalance", "Forbidden",
    "NotFound", "Conflict", "RateLimited", "ServerError", "EngineUnavailable", "ServiceUnavailable",
    "TransportError", "WaitTimeout",
]
