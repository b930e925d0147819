"""Accounts: customers, API keys and what a key may do, portal users, sign-in (two-factor,
single sign-on) and SCIM provisioning. A customer's credits, limits and usage are billing's, which
stands above the accounts: nothing here imports billing.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
The key lookups (``statements.keys``) are offered as statements: every domain that acts for a key
reads its row, and a rule wrapped around each lookup would only rename it. Billing's statements
take the customer row's one lock (``statements.customers.LOCK_CUSTOMER``). The security settings
page (the activity log's, as it shows the audit sinks too) reads the sign-in settings (``sso``,
``scim``). A domain declares its own scopes with ``scopes.Scope``."""

OFFERS = (
    "access",
    "admin",
    "models",
    "portal_roles",
    "scim",
    "scopes",
    "sso",
    "statements.customers",
    "statements.keys",
)
