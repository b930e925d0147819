"""The statements of the privacy domain (its rules: app/services/privacy/)."""
