"""The errors the domains' rules raise: what went wrong, as data, with no HTTP in them.

Each carries a machine ``code``, a ``message`` for people, and the figures a caller
may need (``retry_after`` in seconds, ``balance`` and ``needed`` for a short balance).
The HTTP layer (``app.errors.SERVICE_ERROR_STATUS``) maps each class to its status and
headers; the CLI and the portal show the message. Import nothing from Flask here.
"""
from __future__ import annotations

# RFC 7644's scimType values (SCIM, D32): the code of a domain error that SCIM's error body names
# (``app.errors.scim_error_response``); accounts' SCIM rules raise them.
INVALID_FILTER, INVALID_SYNTAX, INVALID_PATH, INVALID_VALUE = "invalidFilter", "invalidSyntax", "invalidPath", \
    "invalidValue"
MUTABILITY, NO_TARGET, UNIQUENESS = "mutability", "noTarget", "uniqueness"
SCIM_TYPES = frozenset({INVALID_FILTER, INVALID_SYNTAX, INVALID_PATH, INVALID_VALUE, MUTABILITY, NO_TARGET,
                        UNIQUENESS, "tooMany", "invalidVers", "sensitive"})


class ServiceError(Exception):
    """A refusal of the request by a business rule."""

    code = "invalid_request"

    def __init__(self, message: str, *, code: str | None = None, retry_after: int | None = None,
                 details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.code = code or type(self).code
        self.retry_after = retry_after
        self.details = details


class InvalidRequest(ServiceError):
    """The input breaks a rule (target syntax, bulk size, Idempotency-Key shape...)."""


class InvalidRequired(InvalidRequest):
    """A ``required`` match rule that does not parse (D29); the message names the position."""

    code = "invalid_required"


class NotAuthenticated(ServiceError):
    """No API key, or one that is unknown or revoked (``code``: ``unauthorized``, ``invalid_token``)."""

    code = "unauthorized"


class KeyRefused(ServiceError):
    """A refusal of the key itself (D21: expired, outside its allowlist, lacking the scope):
    free, checked right after authentication. ``key`` is the key refused, for the request's
    log line (its customer), set by ``app.accounts.access.check``."""

    key: object | None = None


class KeyExpired(KeyRefused, NotAuthenticated):
    """The key's expiry (D21) has passed: the credential no longer authenticates."""

    code = "key_expired"


class InsufficientBalance(ServiceError):
    code = "insufficient_balance"

    def __init__(self, balance: int, needed: int = 1):
        if needed <= 1:
            message = "the account balance is below 1 credit"
        else:
            message = f"the account balance ({balance}) is below the {needed} credits this bulk call needs"
        super().__init__(message)
        self.balance = balance
        self.needed = needed


class Forbidden(ServiceError):
    """The resource or feature is not the customer's (another customer's scan, bulk on Pro)."""

    code = "forbidden"


class TargetSuppressed(Forbidden):
    """The person this target belongs to opted out (D20): no scan of it is made, free of charge."""

    code = "target_suppressed"


class IpNotAllowed(KeyRefused, Forbidden):
    """The call comes from an address outside the key's allowlist (D21)."""

    code = "ip_not_allowed"


class InsufficientScope(KeyRefused, Forbidden):
    """The key lacks the scope the call needs (D21); ``scope`` names it."""

    code = "insufficient_scope"

    def __init__(self, scope: str):
        super().__init__(f"this API key lacks the scope {scope}, which this call needs")
        self.scope = scope


class NotFound(ServiceError):
    code = "not_found"


class Conflict(ServiceError):
    code = "idempotency_conflict"


class RateLimited(ServiceError):
    """A limit of D8 is reached; ``retry_after`` says when it may not be."""

    def __init__(self, code: str, message: str, retry_after: int):
        super().__init__(message, code=code, retry_after=retry_after)


class WatchLimitReached(RateLimited):
    """The customer has as many watches not ended as its limit allows (D28): 429, free."""

    code = "watch_limit_reached"

    def __init__(self, allowed: int, room: int | None = None):
        if room is None:
            message = f"watch limit reached ({allowed} watches): end one before creating another"
        else:  # a bulk call, refused whole: how many of its targets would fit now
            message = (f"watch limit reached ({allowed} watches): {room} more fit now; send fewer targets or "
                       "end watches first")
        ServiceError.__init__(self, message)


class WatchEnded(Conflict):
    """A change or a run asked of an ended watch (D28): 409, free."""

    code = "watch_ended"

    def __init__(self):
        super().__init__("this watch has ended: create a new watch to follow the target again")


class EngineUnavailable(ServiceError):
    """The engine refused or did not answer a submission; nothing was kept or charged."""

    code = "engine_submit_failed"

    def __init__(self, retry_after: int = 30):
        super().__init__(f"the investigation engine cannot be reached; retry in {retry_after} seconds",
                         retry_after=retry_after)


class AccountError(ValueError):
    """An operator or portal input that cannot be accepted; the message says why."""


# Webhook deliveries (the deliveries API, the portal and the CLI share them). Each is also
# the exception the portal and the CLI already catch (``LookupError`` for an id that is not
# the customer's, ``AccountError`` for a refusal), so they show its message as before.


class DeliveryNotFound(NotFound, LookupError):
    """No delivery of this customer has the id (another customer's is not told apart)."""


class EndpointNotFound(NotFound, LookupError):
    """No webhook endpoint of this key has the id (another key's is not told apart)."""


class DeliveryPending(Conflict, AccountError):
    """A redelivery asked for while the delivery's own attempts are still under way."""

    code = "delivery_pending"


class SecretChanged(Conflict, AccountError):
    """A concurrent roll or switch of the same signing secret won (D25): this one changed nothing,
    so no answer shows a secret that is not in force. 409, free; the portal and the CLI show the
    message (an ``AccountError``, as their other refusals)."""

    code = "conflict"

    def __init__(self, message: str = "the signing secret was changed by another request meanwhile: nothing "
                                      "was changed; look at the secret in force and try again if needed"):
        super().__init__(message)


class WebhookUrlMissing(InvalidRequest, AccountError):
    """The key the delivery belongs to has no webhook URL to send it to now."""

    code = "webhook_url_missing"


class ScanInFlight(Conflict):
    """An erasure asked for while the scan is still queued or running: it has nothing final to erase yet."""

    code = "scan_in_flight"


class DeliveryErased(Conflict, AccountError):
    """A redelivery asked for a delivery whose scan was erased: its body is gone."""

    code = "delivery_erased"


class NothingToRerun(Conflict):
    """A re-run asked of a scan that is not completed or whose sources all answered (D23)."""

    code = "nothing_to_rerun"


class CallbackRefused(ServiceError):
    """An engine callback (E7) that is unsigned, wrongly signed or stale: nothing changes."""

    code = "invalid_signature"


class PayloadTooLarge(InvalidRequest):
    """A request body over the size its endpoint takes (an engine callback's 4 KiB), however it
    was sent: with a Content-Length or chunked."""

    code = "payload_too_large"


class CallbackReplayed(InvalidRequest):
    """An engine callback whose ``webhook-id`` was taken before (a replay): nothing changes."""

    code = "callback_replayed"


class TryAgain(ServiceError):
    """The work asked for could not be done now (a scan held by a look for too long); the caller
    tries again after ``retry_after`` seconds."""

    code = "service_unavailable"
