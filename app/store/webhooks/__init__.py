"""The statements of the webhooks domain (its rules: app/services/webhooks/)."""
