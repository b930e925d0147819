"""Sources: each engine source's health, its probes and quarantine (D30)."""
