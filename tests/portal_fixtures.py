"""The portal's fixtures, once: a Business customer with a key and an owner who logs in with the
form, and a logged-in client for each role."""
from __future__ import annotations

import pytest

from app.accounts import admin, portal_users
from app.accounts import portal_roles as roles
from app.accounts.models import PortalUser
from app.extensions import db
from app.portal import security
from tests.portal.helpers import PASSWORD


@pytest.fixture
def portal_account(make_customer, app):
    """A Business customer with 100 credits, room for 50 scans in flight and a key (``make_customer``'s
    ``.key``, ``.headers``), and its owner ``ops@acme.example`` (``.user``, ``.email``)."""
    acct = make_customer(tier="business", credits=100, inflight=50)
    with db.connection_context():
        acct.user = admin.create_user(acct.id, "ops@acme.example", PASSWORD)
    acct.email = "ops@acme.example"
    return acct


@pytest.fixture
def role_clients(app):
    """``role_clients(account)``: a client logged in (a session started, no form) for a new user of
    each role of ``account``, ``<role>@acme.example``."""
    def make(acct) -> dict:
        tokens = {}
        with db.connection_context():
            for role in roles.ROLES:
                user = admin.create_user(acct.id, f"{role}@acme.example", PASSWORD)
                PortalUser.update(role=role).where(PortalUser.id == user.id).execute()
                tokens[role] = portal_users.start_session(PortalUser.get_by_id(user.id))
        clients = {}
        for role, token in tokens.items():
            clients[role] = app.test_client()
            with clients[role].session_transaction() as session:
                session[security.SESSION_KEY] = token
        return clients
    return make
