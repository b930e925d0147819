"""idempotency: claim, store, replay and conflict rules of Idempotency-Key (D9)."""
from datetime import datetime, timedelta

import pytest
from freezegun import freeze_time

from app.billing import customers, idempotency
from app.billing.models import IdempotencyRecord
from app.plumbing.errors import Conflict

START = datetime(2026, 11, 22, 12, 0, 0)
SCAN = "POST /api/v1/scan"


@pytest.fixture
def customer_id(conn):
    return customers.create_customer("Idem", "business", 0).id


def _hash(body: bytes, endpoint: str = SCAN) -> str:
    return idempotency.request_hash(endpoint, body)


def test_the_body_hash_ignores_key_order_and_spacing_but_not_values():
    assert _hash(b'{"target": "a@example.com", "kind": "email"}') == _hash(b'{"kind":"email","target":"a@example.com"}')
    assert _hash(b'{"target": "a@example.com"}') != _hash(b'{"target": "b@example.com"}')
    assert _hash(b'{"target": "a@example.com"}') != _hash(b'{"target": "a@example.com"}', "POST /api/v1/scan/bulk")
    assert _hash(b"not json") == _hash(b"not json") != _hash(b"not json ")


def test_a_stored_202_is_replayed_and_a_different_body_conflicts(customer_id):
    body = _hash(b'{"target": "a@example.com"}')
    state, record_id = idempotency.claim(customer_id, "k1", SCAN, body)
    assert state == "new"
    idempotency.complete(record_id, 202, '{"ok": true}')
    assert idempotency.claim(customer_id, "k1", SCAN, body) == ("replay", 202, '{"ok": true}')
    with pytest.raises(Conflict) as conflict:
        idempotency.claim(customer_id, "k1", SCAN, _hash(b'{"target": "b@example.com"}'))
    assert conflict.value.code == "idempotency_conflict"
    assert IdempotencyRecord.select().count() == 1


def test_a_key_still_being_processed_conflicts_and_a_released_key_starts_afresh(customer_id):
    body = _hash(b'{"target": "a@example.com"}')
    _, record_id = idempotency.claim(customer_id, "k2", SCAN, body)
    with pytest.raises(Conflict) as conflict:
        idempotency.claim(customer_id, "k2", SCAN, body)
    assert "still being processed" in conflict.value.message
    idempotency.release(record_id)  # the first answer was an error: nothing is stored
    assert IdempotencyRecord.select().count() == 0
    state, again = idempotency.claim(customer_id, "k2", SCAN, body)
    assert state == "new" and not IdempotencyRecord.get_by_id(again).done


def test_release_never_drops_a_stored_answer(customer_id):
    body = _hash(b"{}")
    _, record_id = idempotency.claim(customer_id, "k3", SCAN, body)
    idempotency.complete(record_id, 202, "{}")
    idempotency.release(record_id)
    assert idempotency.claim(customer_id, "k3", SCAN, body) == ("replay", 202, "{}")


def test_keys_are_scoped_per_customer(customer_id):
    other = customers.create_customer("Other", "business", 0).id
    body = _hash(b"{}")
    _, mine = idempotency.claim(customer_id, "shared", SCAN, body)
    idempotency.complete(mine, 202, '{"mine": true}')
    state, theirs = idempotency.claim(other, "shared", SCAN, _hash(b'{"x": 1}'))
    assert state == "new" and theirs != mine


def test_a_stored_answer_expires_after_24_hours_and_an_abandoned_claim_after_2_minutes(customer_id):
    body = _hash(b"{}")
    with freeze_time(START) as clock:
        _, record_id = idempotency.claim(customer_id, "old", SCAN, body)
        idempotency.complete(record_id, 202, "{}")
        clock.move_to(START + timedelta(hours=23, minutes=59))
        assert idempotency.claim(customer_id, "old", SCAN, body)[0] == "replay"
        clock.move_to(START + timedelta(hours=24, seconds=1))
        assert idempotency.claim(customer_id, "old", SCAN, body)[0] == "new"

        idempotency.claim(customer_id, "died", SCAN, body)  # its process died before completing
        clock.move_to(START + timedelta(hours=24, minutes=1))
        with pytest.raises(Conflict):
            idempotency.claim(customer_id, "died", SCAN, body)
        clock.move_to(START + timedelta(hours=24, minutes=2, seconds=2))
        assert idempotency.claim(customer_id, "died", SCAN, body)[0] == "new"
