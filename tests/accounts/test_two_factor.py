"""two_factor: TOTP enrolment confirmed by a code, ten one-time recovery codes, codes never
accepted twice, throttled like passwords, the secret encrypted at rest (D21)."""
from datetime import UTC, datetime, timedelta

import pyotp
import pytest
from freezegun import freeze_time

from app.accounts import admin, login_throttle, portal_users, two_factor
from app.accounts.models import PortalRecoveryCode, PortalUser
from app.accounts.portal_users import LoginRefused, LoginThrottled
from app.accounts.two_factor import CodeRefused
from app.plumbing.errors import AccountError

NOW = datetime(2026, 11, 22, 12, 0, 0)
ADDRESS = "10.0.0.7"


@pytest.fixture
def user(conn):
    cust = admin.create_customer("Two factor", "business")
    return admin.create_user(cust.id, "ops@acme.example", "correct horse battery")


def fresh(user) -> PortalUser:
    return PortalUser.get_by_id(user.id)


def code_at(secret: str, moment: datetime) -> str:
    return pyotp.TOTP(secret).at(moment.replace(tzinfo=UTC))  # the naive times here are UTC


def enrol(user) -> tuple[str, list[str]]:
    secret = two_factor.pending_secret(fresh(user))
    codes = two_factor.confirm_enrolment(fresh(user), code_at(secret, NOW), ADDRESS)
    return secret, codes


def test_the_secret_is_encrypted_at_rest_and_kept_until_confirmed(user):
    with freeze_time(NOW):
        secret = two_factor.pending_secret(fresh(user))
        assert two_factor.pending_secret(fresh(user)) == secret  # a reload shows the same QR code
        stored = fresh(user)
        assert stored.totp_secret_enc and secret not in stored.totp_secret_enc
        assert not two_factor.enabled(stored)
        uri = two_factor.provisioning_uri(secret, stored.email)
        assert uri.startswith("otpauth://totp/") and f"secret={secret}" in uri


def test_a_wrong_code_does_not_enable_and_the_right_one_gives_ten_recovery_codes(user):
    with freeze_time(NOW):
        secret = two_factor.pending_secret(fresh(user))
        with pytest.raises(CodeRefused):
            two_factor.confirm_enrolment(fresh(user), "000000" if code_at(secret, NOW) != "000000" else "111111",
                                         ADDRESS)
        assert not two_factor.enabled(fresh(user))
        codes = two_factor.confirm_enrolment(fresh(user), code_at(secret, NOW), ADDRESS)
    assert len(codes) == 10 and len(set(codes)) == 10
    assert two_factor.enabled(fresh(user))
    stored = {r.digest for r in PortalRecoveryCode.select().where(PortalRecoveryCode.user == user.id)}
    assert len(stored) == 10 and not any(c in d or c.replace("-", "") in d for c in codes for d in stored)


def test_a_code_is_accepted_once_and_an_earlier_one_never_after_it(user):
    with freeze_time(NOW):
        secret, _ = enrol(user)
    later = NOW + timedelta(seconds=90)
    with freeze_time(later):
        assert two_factor.verify_login(user.id, code_at(secret, later), ADDRESS).id == user.id
        with pytest.raises(LoginRefused):  # the same code again, within its window
            two_factor.verify_login(user.id, code_at(secret, later), ADDRESS)
        with pytest.raises(LoginRefused):  # the previous step's code, still within the drift
            two_factor.verify_login(user.id, code_at(secret, later - timedelta(seconds=30)), ADDRESS)
    with freeze_time(later + timedelta(seconds=30)):
        assert two_factor.verify_login(user.id, code_at(secret, later + timedelta(seconds=30)), ADDRESS)


def test_a_code_far_from_now_is_refused(user):
    with freeze_time(NOW):
        secret, _ = enrol(user)
        with pytest.raises(LoginRefused):
            two_factor.verify_login(user.id, code_at(secret, NOW + timedelta(minutes=5)), ADDRESS)


def test_each_recovery_code_works_once(user):
    with freeze_time(NOW):
        _, codes = enrol(user)
        assert two_factor.verify_login(user.id, codes[0].upper(), ADDRESS).id == user.id  # typed in capitals
        with pytest.raises(LoginRefused):
            two_factor.verify_login(user.id, codes[0], ADDRESS)
        assert two_factor.verify_login(user.id, codes[1].replace("-", ""), ADDRESS).id == user.id
        assert two_factor.recovery_codes_left(fresh(user)) == 8


def test_codes_are_throttled_like_passwords(user):
    with freeze_time(NOW):
        secret, _ = enrol(user)
        for _ in range(login_throttle.MAX_PER_ADDRESS_AND_ACCOUNT):
            with pytest.raises(LoginRefused):
                two_factor.verify_login(user.id, "123-bad", ADDRESS)
        with pytest.raises(LoginThrottled):  # even the right code, for the window
            two_factor.verify_login(user.id, code_at(secret, NOW), ADDRESS)


def test_a_disabled_user_is_refused_with_a_right_code(user):
    with freeze_time(NOW):
        secret, _ = enrol(user)
        portal_users.set_disabled(fresh(user).email, True)
        with pytest.raises(LoginRefused):
            two_factor.verify_login(user.id, code_at(secret, NOW + timedelta(seconds=30)), ADDRESS)


def test_turning_it_off_needs_a_current_code_and_is_refused_when_required(user):
    with freeze_time(NOW):
        secret, codes = enrol(user)
    later = NOW + timedelta(minutes=2)
    with freeze_time(later):
        with pytest.raises(CodeRefused):
            two_factor.disable(fresh(user), codes[0], ADDRESS)  # a recovery code does not turn it off
        two_factor.set_required(user.customer_id, True, by="test")
        with pytest.raises(AccountError, match="requires two-factor"):
            two_factor.disable(fresh(user), code_at(secret, later), ADDRESS)
        assert two_factor.enabled(fresh(user))
        two_factor.set_required(user.customer_id, False, by="test")
        two_factor.disable(fresh(user), code_at(secret, later), ADDRESS)
    stored = fresh(user)
    assert not two_factor.enabled(stored) and stored.totp_secret_enc is None
    assert PortalRecoveryCode.select().where(PortalRecoveryCode.user == user.id).count() == 0


def test_required_sends_only_users_without_a_second_factor_to_enrol(user):
    assert not two_factor.required(fresh(user))
    two_factor.set_required(user.customer_id, True, by="test")
    assert two_factor.required(fresh(user))
    with freeze_time(NOW):
        enrol(user)
    assert not two_factor.required(fresh(user))
