"""The statements of the billing domain (its rules: app/services/billing/)."""
