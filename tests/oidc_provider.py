"""A real, independent OpenID provider for the single sign-on tests (D32): the npm package
``oidc-provider`` (pinned in tests/oidc/package-lock.json, installed with ``npm ci`` when its
node_modules is missing), run by Node.js on a free localhost port with tests/oidc/provider.mjs.

Its signing key is made here (``SIGNING_KEY``) and handed to the provider, so a test can also mint
tokens the provider's JWKS vouches for (another audience, expired) and ones it does not.
The test sign-in is the provider's own development login form, posted with ``requests``.
"""
from __future__ import annotations

import json
import re
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import requests
from joserfc.jwk import RSAKey

from simulator.procutil import wait_until

FOLDER = Path(__file__).resolve().parent / "oidc"
PORTAL_CLIENT = "scan-portal"
OTHER_CLIENT = "other-app"
# For the browser test: the portal served on 127.0.0.1 on a port known only then; a loopback
# redirect URI of a native client matches on any port (RFC 8252, section 7.3), as oidc-provider implements.
BROWSER_CLIENT = "scan-portal-browser"
LOOPBACK_REDIRECT_URI = "http://127.0.0.1/app/login/sso/callback"
REDIRECT_URI = "http://localhost/app/login/sso/callback"
ACCOUNTS = {
    "alice": {"email": "alice@acme.example", "email_verified": True, "name": "Alice", "groups": ["scan-admins"]},
    "dave": {"email": "dave@acme.example", "email_verified": True, "name": "Dave", "groups": ["scan-devs"]},
    "erin": {"email": "erin@acme.example", "email_verified": True, "name": "Erin", "groups": ["unmapped"]},
    "bob": {"email": "bob@acme.example", "email_verified": False, "name": "Bob"},
    "carol": {"email": "carol@elsewhere.example", "email_verified": True, "name": "Carol"},
}


@dataclass
class Provider:
    issuer: str
    secrets: dict
    key: RSAKey
    proc: subprocess.Popen = field(repr=False)
    log_path: Path = field(repr=False)
    log: object = field(repr=False)

    def discovery(self) -> dict:
        return requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=5).json()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_installed() -> None:
    """``npm ci`` from the lock file when node_modules is missing (a clean clone)."""
    if (FOLDER / "node_modules" / "oidc-provider").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is missing: install Node.js 20+ and npm to run the single sign-on tests")
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=FOLDER, check=True, timeout=300)


def start(tmp: Path) -> Provider:
    ensure_installed()
    port = free_port()
    key = RSAKey.generate_key(2048, parameters={"kid": "test-signing-1", "use": "sig", "alg": "RS256"},
                              private=True)
    client_secrets = {PORTAL_CLIENT: secrets.token_urlsafe(24), OTHER_CLIENT: secrets.token_urlsafe(24),
                      BROWSER_CLIENT: secrets.token_urlsafe(24)}
    config = {
        "port": port,
        "jwks": {"keys": [key.as_dict(private=True)]},
        "clients": [{"client_id": cid, "client_secret": secret, "redirect_uris": [REDIRECT_URI],
                     "grant_types": ["authorization_code"], "response_types": ["code"],
                     "token_endpoint_auth_method": "client_secret_basic"}
                    for cid, secret in client_secrets.items() if cid != BROWSER_CLIENT]
                   + [{"client_id": BROWSER_CLIENT, "client_secret": client_secrets[BROWSER_CLIENT],
                       "application_type": "native", "redirect_uris": [LOOPBACK_REDIRECT_URI],
                       "grant_types": ["authorization_code"], "response_types": ["code"],
                       "token_endpoint_auth_method": "client_secret_basic"}],
        "accounts": ACCOUNTS,
    }
    config_path = tmp / "oidc-provider.json"
    config_path.write_text(json.dumps(config))
    log_path = tmp / "oidc-provider.log"
    log = open(log_path, "ab")  # the process writes to it until it stops (closed by ``stop``)
    proc = subprocess.Popen([shutil.which("node") or "node", str(FOLDER / "provider.mjs"), str(config_path)],
                            cwd=FOLDER, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    issuer = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"oidc-provider exited: {log_path.read_text()[-2000:]}")
        try:
            return requests.get(f"{issuer}/.well-known/openid-configuration", timeout=1).ok
        except requests.RequestException:
            return False

    wait_until(up, timeout=30, what="oidc-provider")
    return Provider(issuer, client_secrets, key, proc, log_path, log)


def stop(provider: Provider) -> None:
    provider.proc.terminate()
    try:
        provider.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        provider.proc.kill()
        provider.proc.wait()
    provider.log.close()


_FORM_ACTION = re.compile(r'<form[^>]*action="([^"]+)"')


def sign_in_at_provider(authorization_url: str, account: str, browser: requests.Session | None = None) -> str:
    """What a person does at the provider: its login form as ``account``, then its consent page;
    returns the URL the provider sends the browser back to (the portal's callback with its query)."""
    browser = browser or requests.Session()
    url, method, data = authorization_url, "GET", None
    for _ in range(12):
        answer = browser.request(method, url, data=data, allow_redirects=False, timeout=10)
        if answer.is_redirect:
            location = urljoin(url, answer.headers["Location"])
            if location.startswith(REDIRECT_URI):
                return location
            url, method, data = location, "GET", None
            continue
        answer.raise_for_status()
        action = _FORM_ACTION.search(answer.text)
        assert action, answer.text[:500]
        url, method = urljoin(url, action.group(1)), "POST"
        data = ({"prompt": "login", "login": account, "password": "any"} if 'name="login"' in answer.text
                else {"prompt": "consent"})
    raise AssertionError("the provider never sent the browser back")


def callback_path(location: str) -> str:
    """The portal's path and query of the provider's redirect (for Flask's test client)."""
    parts = urlsplit(location)
    return f"{parts.path}?{parts.query}"


def query(location: str) -> dict:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
