"""The statements of the accounts domain (its rules: app/services/accounts/)."""
