"""Accounts: customers, API keys and what a key may do, portal users, sign-in (two-factor,
single sign-on) and SCIM provisioning.

Offers: ``admin`` (what the CLI and the portal manage), ``access`` (scopes, expiry, allowlist),
``keyauth``, ``portal_users``, ``portal_roles``, ``two_factor``, ``login_throttle``, ``sso``, ``scim``,
and ``models``."""
