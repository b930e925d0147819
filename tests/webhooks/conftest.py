"""What the webhooks' rule tests share: a key with a webhook, its URL and secrets, the time they
freeze."""

from datetime import datetime

import pytest

from tests.domain_fixtures import new_customer

URL = "https://hooks.example.com/x"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZg=="  # 16 bytes
NOW = datetime(2026, 11, 22, 12, 0, 0)
RESULT = {"risk": {"score": 10, "band": "low"}}


@pytest.fixture
def hooked(conn):
    return new_customer(webhook_url=URL, webhook_secret=SECRET)


ROTATION_SECRET = "whsec_c2lnbmF0dXJlcyB0ZXN0IHNlY3JldCAwMTIzNDU2Nzg5"


PORTAL_SECRET = "whsec_cG9ydGFsIHNlY3JldCAwMTIzNDU2Nzg5"
