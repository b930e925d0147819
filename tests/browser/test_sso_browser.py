"""Single sign-on in a real Chromium (D32): the login form's "Sign in with SSO" button, the
provider's own pages (npm oidc-provider's development login and consent), back to the portal
signed in. A browser also enforces what a test client does not: the page's CSP on the form's
redirect to another origin, and the session cookie's SameSite on the provider's redirect back."""
import pytest

from app.accounts import sso
from app.extensions import db
from tests import oidc_provider as op

pytestmark = [pytest.mark.browser, pytest.mark.processes]


def test_sign_in_with_sso_through_the_providers_pages(page, served_app, portal_user, oidc_provider):
    with db.connection_context():
        sso.configure(portal_user.id, issuer=oidc_provider.issuer, client_id=op.BROWSER_CLIENT,
                      client_secret=oidc_provider.secrets[op.BROWSER_CLIENT], domains="acme.example",
                      role_claim="groups", role_map="scan-admins=admin")
    page.goto(f"{served_app.url}/app/login")
    page.get_by_label("E-mail").fill("alice@acme.example")
    page.get_by_role("button", name="Sign in with SSO").click()
    page.wait_for_url(f"{oidc_provider.issuer}/interaction/**")
    page.locator('input[name="login"]').fill("alice")
    page.locator('input[name="password"]').fill("any")
    page.locator('button[type="submit"]').click()
    page.locator('input[value="consent"]').wait_for(state="attached")
    page.locator('button[type="submit"]').click()
    page.wait_for_url("**/app/api-keys")
    assert "alice@acme.example (admin)" in page.locator("header").inner_text()
