"""Python client of the Public Scan API, and its command line (``scan-api``).

    from scan_api_client import ScanClient
    with ScanClient("https://api.example.com", "service_live_...") as api:
        scan = api.wait(api.create("jane.doe@example.com"), progress=True)
        print(scan.status, scan.result.risk.band if scan.result else scan.failure.code)

See ``docs/client.md`` in the service's repository.
"""
from scan_api_client.client import (DEFAULT_BASE_URL, FINAL_STATUSES, LIVE_KEY_PREFIX, MAX_BULK_TARGETS,
                                    TEST_KEY_PREFIX, ScanClient, parse_rate_limit)
from scan_api_client.errors import (ApiError, AuthenticationError, Conflict, DeliveryPending, EngineUnavailable,
                                    Forbidden,
                                    InsufficientBalance, NotFound, RateLimited, ScanClientError, ServerError,
                                    ServiceUnavailable, TransportError, ValidationError, WaitTimeout,
                                    WebhookVerificationError)
from scan_api_client.models import (Batch, Delivery, DeliveryAttempt, Failure, Page, Rejected, Result, Scan,
                                    WebhookEvent)
from scan_api_client.webhooks import SIGNATURE_HEADER, verify_signature, verify_standard, verify_webhook

__version__ = "1.0.0"

__all__ = [
    "ScanClient", "parse_rate_limit", "verify_webhook", "verify_signature", "verify_standard", "SIGNATURE_HEADER",
    "DEFAULT_BASE_URL", "FINAL_STATUSES", "MAX_BULK_TARGETS", "LIVE_KEY_PREFIX", "TEST_KEY_PREFIX",
    "Scan", "Result", "Failure", "Batch", "Rejected", "Delivery", "DeliveryAttempt", "Page", "WebhookEvent",
    "ScanClientError", "ApiError", "ValidationError", "AuthenticationError", "InsufficientBalance", "Forbidden",
    "NotFound", "Conflict", "DeliveryPending", "RateLimited", "ServerError", "EngineUnavailable", "ServiceUnavailable",
    "TransportError", "WaitTimeout", "WebhookVerificationError",
]
