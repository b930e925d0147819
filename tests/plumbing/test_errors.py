"""errors: the domain errors as data, their codes and figures, and the classes other callers catch."""
import pytest

from app.plumbing.errors import (
    AccountError,
    Conflict,
    DeliveryNotFound,
    DeliveryPending,
    EngineUnavailable,
    Forbidden,
    InsufficientBalance,
    InvalidRequest,
    NotAuthenticated,
    NotFound,
    RateLimited,
    ServiceError,
    WebhookUrlMissing,
)


@pytest.mark.parametrize("cls, code", [
    (ServiceError, "invalid_request"), (InvalidRequest, "invalid_request"), (NotAuthenticated, "unauthorized"),
    (Forbidden, "forbidden"), (NotFound, "not_found"), (Conflict, "idempotency_conflict"),
    (DeliveryNotFound, "not_found"), (DeliveryPending, "delivery_pending"), (WebhookUrlMissing, "webhook_url_missing"),
])
def test_each_class_has_its_default_code_and_keeps_the_message(cls, code):
    error = cls("what happened")
    assert error.code == code
    assert error.message == "what happened"
    assert str(error) == "what happened"
    assert (error.retry_after, error.details) == (None, None)


def test_a_code_given_at_the_raise_overrides_the_class_code():
    error = InvalidRequest("no targets", code="no_targets", details={"field": "targets"})
    assert error.code == "no_targets"
    assert InvalidRequest.code == "invalid_request"  # the class is untouched
    assert error.details == {"field": "targets"}


def test_insufficient_balance_says_what_a_single_and_a_bulk_call_need():
    single = InsufficientBalance(0)
    assert (single.balance, single.needed, single.code) == (0, 1, "insufficient_balance")
    assert single.message == "the account balance is below 1 credit"
    bulk = InsufficientBalance(3, 5)
    assert (bulk.balance, bulk.needed) == (3, 5)
    assert bulk.message == "the account balance (3) is below the 5 credits this bulk call needs"


def test_rate_limited_carries_its_code_and_retry_after():
    error = RateLimited("rate_limit_hour", "the hour is full", 120)
    assert (error.code, error.message, error.retry_after) == ("rate_limit_hour", "the hour is full", 120)


def test_engine_unavailable_says_when_to_retry():
    assert EngineUnavailable().retry_after == 30
    error = EngineUnavailable(5)
    assert error.retry_after == 5 and "retry in 5 seconds" in error.message
    assert error.code == "engine_submit_failed"


def test_delivery_errors_are_also_what_the_portal_and_cli_catch():
    assert isinstance(DeliveryNotFound("x"), LookupError) and isinstance(DeliveryNotFound("x"), NotFound)
    assert isinstance(DeliveryPending("x"), AccountError) and isinstance(DeliveryPending("x"), Conflict)
    assert isinstance(WebhookUrlMissing("x"), AccountError) and isinstance(WebhookUrlMissing("x"), InvalidRequest)
    assert issubclass(AccountError, ValueError) and not issubclass(AccountError, ServiceError)
