"""The statements of the events domain (its rules: app/services/events/)."""
