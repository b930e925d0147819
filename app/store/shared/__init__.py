"""The statements of the shared domain (its rules: app/services/shared/)."""
