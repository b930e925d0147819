"""Python client of the Public Scan API, and its command line (``scan-api``).

    from scan_api_client import ScanClient
    with ScanClient("https://api.example.com", "service_live_...") as api:
        scan = api.wait(api.create("jane.doe@example.com"), progress=True)
        print(scan.status, scan.result.risk.band if scan.result else scan.failure.code)

See ``docs/client.md`` in the service's repository.
"""
from scan_api_client.client import (
                                    DEFAULT_BASE_URL,
                                    FINAL_STATUSES,
                                    LIVE_KEY_PREFIX,
                                    MAX_BULK_TARGETS,
                                    TEST_KEY_PREFIX,
                                    ScanClient,
                                    parse_rate_limit,
)
from scan_api_client.errors import (
                                    ApiError,
                                    AuthenticationError,
                                    Conflict,
                                    DeliveryPending,
                                    EngineUnavailable,
                                    Forbidden,
                                    InsufficientBalance,
                                    NotFound,
                                    NothingToRerun,
                                    RateLimited,
                                    ScanClientError,
                                    ServerError,
                                    ServiceUnavailable,
                                    TransportError,
                                    ValidationError,
                                    WaitTimeout,
                                    WebhookVerificationError,
)
from scan_api_client.models import (
    Account,
    ActivityEntry,
    Batch,
    Coverage,
    Delivery,
    DeliveryAttempt,
    Failure,
    Feedback,
    Finding,
    KeyAccess,
    Page,
    Reason,
    Rejected,
    Result,
    Scan,
    Source,
    WebhookEvent,
    Windows,
)
from scan_api_client.webhooks import SIGNATURE_HEADER, verify_signature, verify_standard, verify_webhook

__version__ = "1.0.0"

__all__ = [
                                    "DEFAULT_BASE_URL",
                                    "FINAL_STATUSES",
                                    "LIVE_KEY_PREFIX",
                                    "MAX_BULK_TARGETS",
                                    "SIGNATURE_HEADER",
                                    "TEST_KEY_PREFIX",
                                    "Account",
                                    "ActivityEntry",
                                    "ApiError",
                                    "AuthenticationError",
                                    "Batch",
                                    "Conflict",
                                    "Coverage",
                                    "Delivery",
                                    "DeliveryAttempt",
                                    "DeliveryPending",
                                    "EngineUnavailable",
                                    "Failure",
                                    "Feedback",
                                    "Finding",
                                    "Forbidden",
                                    "InsufficientBalance",
                                    "KeyAccess",
                                    "NotFound",
                                    "NothingToRerun",
                                    "Page",
                                    "RateLimited",
                                    "Reason",
                                    "Rejected",
                                    "Result",
                                    "Scan",
                                    "ScanClient",
                                    "ScanClientError",
                                    "ServerError",
                                    "ServiceUnavailable",
                                    "Source",
                                    "TransportError",
                                    "ValidationError",
                                    "WaitTimeout",
                                    "WebhookEvent",
                                    "WebhookVerificationError",
                                    "Windows",
                                    "parse_rate_limit",
                                    "verify_signature",
                                    "verify_standard",
                                    "verify_webhook",
]
