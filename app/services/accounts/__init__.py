"""Accounts: customers, API keys and their access (scopes, expiry, allowlist), portal users, roles,
two-factor and login throttling."""
