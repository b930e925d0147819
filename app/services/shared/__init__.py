"""Shared: what every domain uses (errors, paging, the accounted-call pipeline, periodic jobs, time
bounds, crypto)."""
