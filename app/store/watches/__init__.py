"""The statements of the watches domain (its rules: app/services/watches/)."""
