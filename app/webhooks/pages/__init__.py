"""The webhooks' portal pages: a key's page (its access, webhook settings, secrets and delivery log)
and its further endpoints."""
