"""Intake: a scan's creation, single, bulk or re-run: its admission (limits, charge and rows in one
transaction), the opt-out check, which sources to ask, the engine's submission and the first look,
and the API calls and the portal's re-run button that create scans.

It stands above the domains a creation uses (scans, billing, privacy, sources, tracking), so that
scans needs none of them, and below the watches, which create their scans through it.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py)."""

OFFERS = (
    "creation",
)
