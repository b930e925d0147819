"""A completed scan that did not meet its ``required`` rule gives back what its creation cost
(D29): its items are withheld by ``app.scans.required.settle``, its credits come back here, in the
transaction that writes its final state (so a scan completed twice is refunded once, the second
completion finding it final)."""
from __future__ import annotations

from app.activity import entries
from app.billing import charges

REFUND_ACTION = "scan.refund"  # the activity log's name for it (no API route: the service's own act)
REFUND_NOTE = "no match for the scan's required rule"


def refund_unmatched(scans: list) -> int:
    """Give back what creating each of ``scans`` (one customer's, as ``settle`` found them) cost:
    a ledger row and an activity entry naming the scan each, the balance moved with the row (in
    the caller's transaction). A scan whose creation was not charged (test mode) gets nothing.
    Returns the credits given back."""
    given = 0
    for scan in scans:
        amount = charges.creation_refund(scan.livemode)
        if not amount:
            continue
        charges.apply(scan.customer_id, amount, "refund", scan_id=scan.id, bulk_id=scan.bulk_id, note=REFUND_NOTE)
        entries.record(customer_id=scan.customer_id, livemode=scan.livemode, action=REFUND_ACTION, status=200,
                       credits=-amount, key_id=scan.api_key_id, resource_id=scan.id)
        given += amount
    return given
