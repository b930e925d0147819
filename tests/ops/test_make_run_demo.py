"""What ``make run`` (``app.dev``) prints before it starts the processes: the demo customer's id, a
new key, a portal login (its owner made once, with a password shown that once) and the
held-connection server's port with a ``?wait=`` call on it; and the demo SSO customer, signing in
through the simulator's stand-in OpenID provider."""
import requests
from werkzeug.security import check_password_hash

from app import dev
from app.accounts.models import Customer, PortalUser
from app.extensions import db
from simulator.app import create_sim_app
from tests.accounts.pages.test_sso_simulator import pick_at_provider, to_provider
from tests.conftest import ServerThread
from tests.oidc_provider import free_port


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


def test_the_demo_sso_customer_signs_in_through_the_simulators_provider(app, served_app):
    """What make run wires: the demo SSO customer's settings, the simulator started with the
    ``SIM_OIDC_CLIENTS`` it is handed, and jane@sso.example signed in through its page."""
    api_port = served_app.url.rsplit(":", 1)[1]
    sim_port = str(free_port())
    with db.connection_context():
        first = dev.demo_sso(api_port, sim_port)
        demo = dev.demo_sso(api_port, sim_port)  # a second run: the same customer, a new secret
        assert Customer.select().where(Customer.name == dev.DEMO_SSO_NAME).count() == 1
    assert demo.customer_id == first.customer_id and demo.client_secret != first.client_secret
    assert demo.issuer == f"http://127.0.0.1:{sim_port}/_sim/oidc"
    shown = dev.banner(dev.Demo("cus_x", "key", dev.DEMO_PORTAL_EMAIL, None), api_port, "1", demo)
    assert f"{dev.DEMO_SSO_NAME} ({demo.customer_id})" in shown and demo.issuer in shown
    assert f"at http://127.0.0.1:{api_port}/app/login type {dev.DEMO_SSO_EMAIL}" in shown

    simulator = ServerThread(create_sim_app({"SIM_OIDC_CLIENTS": demo.sim_clients()}), port=int(sim_port))
    try:
        browser = requests.Session()
        url = to_provider(browser, served_app.url, dev.DEMO_SSO_EMAIL)
        assert url.startswith(demo.issuer + "/authorize?")
        assert pick_at_provider(browser, url, dev.DEMO_SSO_EMAIL).url == f"{served_app.url}/app/api-keys"
    finally:
        simulator.stop()
    with db.connection_context():
        jane = PortalUser.get(PortalUser.email == dev.DEMO_SSO_EMAIL)
    assert jane.customer_id == demo.customer_id and jane.role == "admin"
