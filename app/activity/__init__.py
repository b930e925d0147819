"""Activity: what each call and portal action did and cost (the activity log), its export, and
the push of audit events to a customer's SIEM.

What other domains may import from it is ``OFFERS``; the rest is its own (tests/unit/test_layers.py).
A charge's statement writes its activity entry in the same round trip (``statements.entries``)."""

OFFERS = (
    "audit_sinks",
    "entries",
    "models",
    "statements.entries",
)
