"""The statements of the sources domain (its rules: app/services/sources/)."""
