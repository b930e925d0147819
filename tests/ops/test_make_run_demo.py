"""What ``make run`` (``app.dev``) prints before it starts the processes: the demo customer's id, a
new key, a portal login (its owner made once, with a password shown that once) and the
held-connection server's port with a ``?wait=`` call on it."""
from werkzeug.security import check_password_hash

from app import dev
from app.extensions import db
from app.models import PortalUser


def test_the_demo_has_a_customer_id_a_key_and_a_portal_login_shown_once(app):
    with db.connection_context():
        first = dev.demo_accounts()
        again = dev.demo_accounts()
        user = PortalUser.get(PortalUser.email == dev.DEMO_PORTAL_EMAIL)
    assert first.customer_id.startswith("cus_") and again.customer_id == first.customer_id
    assert first.api_key != again.api_key  # a new key each run
    assert user.customer_id == first.customer_id and user.role == "owner"
    assert first.portal_password and check_password_hash(user.password_hash, first.portal_password)
    assert again.portal_password is None  # printed once, when made

    shown = dev.banner(first, "9500", "9501")
    assert f"Demo customer: {first.customer_id}" in shown and f"Demo key (shown once): {first.api_key}" in shown
    assert f"Portal: http://127.0.0.1:9500/app/login  {dev.DEMO_PORTAL_EMAIL}  password: {first.portal_password}" \
        in shown
    assert "curl -s -X POST 'http://127.0.0.1:9501/api/v1/scan?wait=60'" in shown  # API_PORT + 1 waits
    later = dev.banner(again, "9500", "9501")
    assert first.portal_password not in later and f"users reset-password {dev.DEMO_PORTAL_EMAIL}" in later
