"""Standard Webhooks signatures and rolling secret rotation (D16), on real deliveries to the
simulator's receivers (E4), checked with the ``standardwebhooks`` package from PyPI and with
``app/plumbing/signatures.py``; rotation through the service, the operator CLI and the portal."""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from freezegun import freeze_time
from standardwebhooks import Webhook, WebhookVerificationError

from app.accounts import admin
from app.accounts.models import ApiKey
from app.plumbing.crypto import decrypt_secret
from app.plumbing.errors import AccountError
from app.plumbing.signatures import verify_signature, verify_standard
from app.webhooks import outbox, signing_secrets
from app.webhooks.models import WebhookDelivery
from tests.portal.helpers import PASSWORD, csrf, login

SECRET = "whsec_c2lnbmF0dXJlcyB0ZXN0IHNlY3JldCAwMTIzNDU2Nzg5"
START = "2026-11-21 12:00:00"


@pytest.fixture
def receiver(sim_receiver):
    """A receiver that checks ``X-Service-Signature`` with ``secret``: ``(url, deliveries())``."""
    def make(secret=SECRET, responses=(200,)):
        return sim_receiver(secret, responses)
    return make


def unix(moment: str) -> int:
    return int(datetime.fromisoformat(moment).replace(tzinfo=UTC).timestamp())


def send(account, jobs) -> dict:
    """Send one test event and return what the receiver got."""
    delivery = outbox.send_test_event(account.key.id, account.customer.id)
    jobs.run()
    assert WebhookDelivery.get_by_id(delivery.id).status == "succeeded"
    return delivery


def test_a_real_delivery_verifies_with_standardwebhooks_and_the_helper(make_customer, receiver, jobs):
    url, received = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    with freeze_time(START):
        delivery = send(account, jobs)
        [got] = received()
        raw, headers = got["body"].encode(), got["headers"]
        assert (headers["Webhook-Id"], headers["Webhook-Timestamp"]) == (delivery.id, str(unix(START)))
        assert headers["X-Service-Timestamp"] == str(unix(START) * 1000)
        assert re.fullmatch(r"v1,[A-Za-z0-9+/]{43}=", headers["Webhook-Signature"])
        assert Webhook(SECRET).verify(raw, headers) == json.loads(raw)  # the library, from PyPI
        assert verify_standard(SECRET, raw, headers) and verify_signature(SECRET, raw, headers["X-Service-Signature"])
        assert got["signature_valid"] is True
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + "b3RoZXIgc2VjcmV0IDAxMjM0NTY3ODlhYmNkZWY=").verify(raw, headers)
        assert not verify_standard(SECRET, raw + b" ", headers)
        assert not verify_standard(SECRET, raw, {**headers, "Webhook-Id": "dlv_other"})
    # The same delivery replayed later: refused by its timestamp, though its signature is right.
    assert not verify_standard(SECRET, raw, headers, now=unix(START) + 301)
    assert verify_standard(SECRET, raw, headers, now=unix(START) + 300)
    assert not verify_standard(SECRET, raw, headers, now=unix(START) - 301)
    with freeze_time("2026-11-21 12:05:01"), pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET).verify(raw, headers)


def test_a_stored_secret_of_the_old_form_keeps_signing_both_schemes(make_customer, receiver, jobs):
    legacy = "legacy-secret-from-before-whsec"
    url, received = receiver(secret=legacy)
    account = make_customer(webhook_url=url)
    from app.plumbing.crypto import encrypt_secret
    ApiKey.update(webhook_secret_enc=encrypt_secret(legacy)).where(ApiKey.id == account.key.id).execute()
    send(account, jobs)
    [got] = received()
    assert got["signature_valid"] is True
    assert verify_standard(legacy, got["body"].encode(), got["headers"])  # keyed with its UTF-8 bytes


def test_rolling_rotation_breaks_no_receiver(make_customer, receiver, jobs):
    """A receiver that knows only the old secret verifies X-Service-Signature until the switch;
    one using the Standard Webhooks headers verifies with either secret throughout."""
    old_url, old_only = receiver(secret=SECRET)
    account = make_customer(webhook_url=old_url, webhook_secret=SECRET)
    with freeze_time(START) as frozen:
        rolled = signing_secrets.roll_secret(account.key.id, account.customer.id, overlap_hours=24)
        new = rolled.secret
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/]{43}=", new) and new != SECRET
        assert rolled.switch_at == datetime(2026, 11, 22, 12, 0, 0)
        key = ApiKey.get_by_id(account.key.id)
        assert decrypt_secret(key.webhook_next_secret_enc) == new and new not in key.webhook_next_secret_enc
        with pytest.raises(AccountError, match="already under way"):
            signing_secrets.roll_secret(account.key.id, account.customer.id)

        for hours in (0, 23):  # during the overlap
            frozen.tick(hours * 3600)
            send(account, jobs)
            got = old_only()[-1]
            raw, headers = got["body"].encode(), got["headers"]
            assert got["signature_valid"] is True  # the old secret, in X-Service-Signature
            assert not verify_signature(new, raw, headers["X-Service-Signature"])
            assert len(headers["Webhook-Signature"].split(" ")) == 2
            assert Webhook(SECRET).verify(raw, headers) and Webhook(new).verify(raw, headers)
            assert verify_standard(SECRET, raw, headers) and verify_standard([new], raw, headers)

        frozen.tick(3600)  # the overlap is over: switched lazily at the next signing
        send(account, jobs)
        got = old_only()[-1]
        raw, headers = got["body"].encode(), got["headers"]
        assert got["signature_valid"] is False and verify_signature([SECRET, new], raw, headers["X-Service-Signature"])
        assert Webhook(new).verify(raw, headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(SECRET).verify(raw, headers)
        key = ApiKey.get_by_id(account.key.id)
        assert decrypt_secret(key.webhook_secret_enc) == new
        assert (key.webhook_next_secret_enc, key.webhook_secret_switch_at) == (None, None)


def test_switch_now_ends_the_overlap_and_an_overlap_of_zero_replaces_at_once(make_customer, receiver, jobs):
    url, received = receiver()
    account = make_customer(webhook_url=url, webhook_secret=SECRET)
    with pytest.raises(AccountError, match="no secret rotation"):
        signing_secrets.switch_secret(account.key.id, account.customer.id)
    new = signing_secrets.roll_secret(account.key.id, account.customer.id, overlap_hours=168).secret
    signing_secrets.switch_secret(account.key.id, account.customer.id)
    send(account, jobs)
    headers = received()[-1]["headers"]
    assert received()[-1]["signature_valid"] is False and len(headers["Webhook-Signature"].split(" ")) == 1
    assert Webhook(new).verify(received()[-1]["body"], headers)

    newer = signing_secrets.roll_secret(account.key.id, account.customer.id, overlap_hours=0).secret
    key = ApiKey.get_by_id(account.key.id)
    assert decrypt_secret(key.webhook_secret_enc) == newer and key.webhook_next_secret_enc is None


# --- operator CLI -----------------------------------------------------------------------------


def cli(app, *args):
    result = app.test_cli_runner().invoke(args=list(args))
    return result.exit_code, result.stdout + result.stderr if result.exit_code else result.stdout


def test_cli_roll_and_switch(app, make_customer, caplog):
    account = make_customer(webhook_secret=SECRET)
    # The whole sequence runs on one frozen clock: the second roll must fall inside the 48-hour
    # overlap that the first one opened, whatever today's date is.
    with freeze_time(START) as clock:
        code, out = cli(app, "keys", "roll-secret", account.key.id, "--overlap-hours", "48", "--json")
        assert code == 0, out
        data = json.loads(out)
        assert (data["key_id"], data["switch_at"], data["overlap_hours"]) == (account.key.id, "2026-11-23T12:00:00Z", 48)
        assert decrypt_secret(ApiKey.get_by_id(account.key.id).webhook_next_secret_enc) == data["webhook_secret"]
        assert data["webhook_secret"] not in caplog.text  # never logged

        clock.tick(47 * 3600)  # an hour before the overlap ends: still under way
        code, out = cli(app, "keys", "roll-secret", account.key.id, "--json")
        assert code == 1, out
        assert json.loads(out.splitlines()[0])["error"].startswith("a secret rotation is already under way")
        code, out = cli(app, "keys", "switch-secret", account.key.id)
        assert code == 0, out
        assert "now the only one" in out
        assert decrypt_secret(ApiKey.get_by_id(account.key.id).webhook_secret_enc) == data["webhook_secret"]
        code, out = cli(app, "keys", "switch-secret", account.key.id)
        assert code == 1, out
        assert "no secret rotation" in out
        code, out = cli(app, "keys", "roll-secret", "key_unknown", "--overlap-hours", "500")
        assert code == 1, out
        assert "Traceback" not in out
        code, out = cli(app, "keys", "roll-secret", "key_unknown")
        assert code == 1, out
        assert "no key key_unknown" in out


# --- portal -----------------------------------------------------------------------------------


def test_portal_rolls_with_confirmation_then_switches_now(client, make_customer):
    account = make_customer(webhook_secret=SECRET)
    admin.create_user(account.id, "ops@acme.example", PASSWORD)
    page = f"/app/api-keys/{account.key.id}"
    with freeze_time(START):
        login(client)
        asked = client.post(f"{page}/secret/roll", data={"csrf_token": csrf(client, page), "overlap_hours": "12"})
        html = asked.get_data(as_text=True)
        assert asked.status_code == 200 and "Confirm: roll the secret" in html
        assert re.search(r'id="roll-ends">2026-11-22 00:00:00 UTC<', html)
        assert ApiKey.get_by_id(account.key.id).webhook_next_secret_enc is None  # nothing yet

        done = client.post(f"{page}/secret/roll", data={"csrf_token": csrf(client, page), "overlap_hours": "12",
                                                        "confirm": "yes"})
        html = done.get_data(as_text=True)
        shown = re.search(r'id="revealed-secret">([^<]+)<', html).group(1)
        assert decrypt_secret(ApiKey.get_by_id(account.key.id).webhook_next_secret_enc) == shown
        assert shown not in client.get(page).get_data(as_text=True)  # shown once
        html = client.get(page).get_data(as_text=True)
        assert re.search(r'id="switch-at">2026-11-22 00:00:00 UTC<', html) and "Switch now" in html

        bad = client.post(f"{page}/secret/roll", data={"csrf_token": csrf(client, page), "overlap_hours": "200"})
        assert bad.status_code == 400
        switched = client.post(f"{page}/secret/switch", data={"csrf_token": csrf(client, page)})
        assert switched.status_code == 302
        key = ApiKey.get_by_id(account.key.id)
        assert decrypt_secret(key.webhook_secret_enc) == shown and key.webhook_next_secret_enc is None
        assert client.post(f"{page}/secret/switch", data={}).status_code in (302, 400)  # no CSRF: nothing happens


# --- racing replacements ---------------------------------------------------------------------


def _race(database_url, key_id, customer_id, replace):
    """Run ``replace`` twice at once, both having read the key before either writes: a session
    holds the key's row lock until both requests wait on their UPDATE, then lets them go."""
    import threading

    import psycopg2

    from app.extensions import db
    from simulator.procutil import wait_until

    holder = psycopg2.connect(database_url)
    holder.autocommit = False
    with holder.cursor() as cursor:
        cursor.execute(f'SELECT 1 FROM "{ApiKey._meta.table_name}" WHERE id = %s FOR UPDATE', (key_id,))
    outcomes = []

    def one():
        with db.connection_context():
            try:
                outcomes.append(("ok", replace(key_id, customer_id)))
            except AccountError as exc:
                outcomes.append(("refused", str(exc)))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()

    watcher = psycopg2.connect(database_url)
    watcher.autocommit = True  # pg_stat_activity is read once per transaction: a fresh look each time

    def both_waiting():
        with watcher.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND datname = current_database() AND query LIKE 'UPDATE%%api_key%%'")
            return cursor.fetchone()[0] == 2

    try:
        wait_until(both_waiting, 10, "both replacements waiting on the row lock")
    finally:
        holder.rollback()
        holder.close()
        watcher.close()
    for thread in threads:
        thread.join(10)
    return outcomes


@pytest.mark.parametrize("replace", [
    lambda key_id, customer_id: signing_secrets.roll_secret(key_id, customer_id, 0).secret,
    lambda key_id, customer_id: signing_secrets.generate_secret(key_id, customer_id),
], ids=["roll with no overlap", "generate"])
def test_a_double_click_leaves_one_secret_in_force_and_says_so(app, make_customer, replace):
    """Two replacements that read the same secret: one wins, the other is refused, so no page
    shows a secret as in force that never signs."""
    account = make_customer(webhook_secret=SECRET)
    outcomes = _race(app.config["DATABASE_URL"], account.key.id, account.customer.id, replace)
    assert sorted(kind for kind, _ in outcomes) == ["ok", "refused"], outcomes
    [winner] = [value for kind, value in outcomes if kind == "ok"]
    [refusal] = [value for kind, value in outcomes if kind == "refused"]
    assert "changed by another request" in refusal
    assert decrypt_secret(ApiKey.get_by_id(account.key.id).webhook_secret_enc) == winner
