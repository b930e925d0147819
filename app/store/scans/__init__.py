"""The statements of the scans domain (its rules: app/services/scans/)."""
