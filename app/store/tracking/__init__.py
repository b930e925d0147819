"""The statements of the tracking domain (its rules: app/services/tracking/)."""
