"""Tracking: a scan's states, the engine, its looks and callbacks, waits and the recovery sweep."""
