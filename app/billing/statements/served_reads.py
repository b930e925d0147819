"""The served read: a key's look-up, its charge and the scan or batch it reads, in one statement.

The rules (the price, which key modes are billed, which rules a key must pass) are the services'
and come in as parameters.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from app.accounts.models import ApiKey, Customer
from app.accounts.statements.keys import KEY_COLUMNS, KEY_ROW_LENGTH, conditions, key_from_row
from app.activity.statements import entries as activity_store
from app.billing.statements.balances import add_read, minute_of, named, window_columns, window_times
from app.plumbing.db import columns, instance, table
from app.plumbing.planned import execute_planned
from app.scans.models import BulkBatch, Scan
from app.scans.statements import BATCH_SCAN_COLUMNS

# --- served reads: authentication, charge and read in one statement ---------------------
# The key look-up, the conditional charge with its ledger row, the call's activity log entry
# (D20), the quota windows the answer reports (D8) and the scan (or the batch and its scans)
# are one statement: one round trip and one commit per read.
# The key is charged only if it passes the rules its caller names (``keys.KEY_CONDITIONS``:
# active, unexpired, used from an allowed address, carrying the scope, of a billed mode; the
# rules' values are parameters) and its balance covers the price; the object and the windows
# read are those of the key's mode (D15). The entry is written for a key that may be charged
# (``allowed``): the other calls' entries (a test key's, a refused key's) are written apart.
# Parameters are named (``%(name)s``): several are used more than once.

_KEY_MODE = "(SELECT livemode FROM k)"
_KEY_CUSTOMER = "(SELECT customer_id FROM k)"
# The key's id is k's first column (ApiKey's first field); the customer's is named "id" too, so
# ``allowed`` names it by position.
if ApiKey._meta.sorted_fields[0].column_name != "id":
    raise RuntimeError("the served read's statement takes the key's id as the first column of api_key")

# The entry's values, in ``activity_store.COLUMNS`` order: its status is the answer the owner
# decides (none charged: the balance short; not found; the key's customer's; another's).
_ENTRY = (
    "SELECT %(entry_id)s::text, %(now)s::timestamp, allowed.customer_id, allowed.livemode, allowed.key_id, NULL, "
    "NULL, %(action)s::text, %(resource_id)s::text, "
    "CASE WHEN charged.id IS NULL THEN %(status_short)s::smallint "
    "WHEN o.owner IS NULL THEN %(status_missing)s::smallint "
    "WHEN o.owner = charged.id THEN %(status_owned)s::smallint ELSE %(status_other)s::smallint END, "
    "CASE WHEN charged.id IS NULL THEN 0 ELSE %(price)s::integer END, %(entry_address)s::text, %(request_id)s::text, "
    "NULL, NULL, NULL FROM allowed CROSS JOIN o LEFT JOIN charged ON true RETURNING status")
_NOTE = ("(SELECT CASE WHEN o.owner IS NULL THEN %(note_missing)s WHEN o.owner = charged.id THEN %(note_owned)s "
         "ELSE %(note_other)s END FROM o)")


def _charged(owner: str, rules: tuple[str, ...]) -> str:
    """The key; ``owner``'s customer, the object read in the key's mode (none: 404); the charge
    added to its minute's ledger row of summed reads (D24) and the call's activity entry, both
    naming the answer the owner decides (found and owned, another customer's, or not found: the
    ledger's note is one endpoint for the three, so a minute's reads are one row); the key's
    windows, after the new balance and the entry's status (None: no entry written)."""
    windows = window_columns(customer=_KEY_CUSTOMER, livemode=_KEY_MODE, param=named)
    return f"""
WITH k AS (SELECT {KEY_COLUMNS} FROM {table(ApiKey)} AS k JOIN {table(Customer)} AS c
           ON c.id = k.customer_id WHERE k.digest = %(digest)s),
allowed AS (SELECT key_id, customer_id, livemode FROM k AS key(key_id) WHERE {conditions(rules)}),
o AS (SELECT ({owner}) AS owner),
charged AS (
    UPDATE {table(Customer)} SET balance = balance - %(price)s
    WHERE id = (SELECT customer_id FROM allowed) AND balance >= %(price)s
    RETURNING id, balance),
ledger AS ({add_read(source="charged", note_sql=_NOTE, livemode_sql=_KEY_MODE, param=named)}),
entry AS ({activity_store.insert_select(_ENTRY)}),
w AS MATERIALIZED (
    SELECT (SELECT balance_after FROM ledger), (SELECT status FROM entry), {windows})
"""


_WINDOWS = 8  # the new balance, the entry's status, then the six window columns
_BATCH_WIDTH = len(BulkBatch._meta.sorted_fields)
_SCAN_ENTRY = ", ".join(f"s.{column}" for column in BATCH_SCAN_COLUMNS)  # a batch read's columns
_NO_ENTRY = ", ".join(["NULL"] * len(BATCH_SCAN_COLUMNS))  # the first row has no scan's


@cache
def served_read_sql(bulk: bool, rules: tuple[str, ...]) -> str:
    """The served read's statement of a scan or (``bulk``) a batch, charging a key that passes
    ``rules`` (names of ``keys.KEY_CONDITIONS``); made once per pair."""
    if not bulk:
        return (_charged(f"SELECT customer_id FROM {table(Scan)} WHERE id = %(object_id)s AND livemode = {_KEY_MODE}",
                         rules)
                + f"SELECT k.*, w.*, {columns(Scan, 's')} FROM k CROSS JOIN w LEFT JOIN {table(Scan)} AS s "
                  f"ON s.id = %(object_id)s")
    # The key, charge and batch on the first row, then one row per scan with only its own
    # columns: the key's and windows' columns are not sent (nor decoded) a hundred times.
    return _charged(f"SELECT customer_id FROM {table(BulkBatch)} WHERE id = %(object_id)s "
                    f"AND livemode = {_KEY_MODE}", rules) + (
        f", b AS (SELECT {columns(BulkBatch)} FROM {table(BulkBatch)} WHERE id = %(object_id)s)\n"
        f"SELECT k.*, w.*, b.*, {_NO_ENTRY}, -1 AS position FROM k CROSS JOIN w LEFT JOIN b ON true\n"
        f"UNION ALL\n"
        f"SELECT {', '.join(['NULL'] * (KEY_ROW_LENGTH + _WINDOWS + _BATCH_WIDTH))}, {_SCAN_ENTRY}, s.bulk_index "
        f"FROM b JOIN {table(Scan)} AS s ON s.bulk_id = b.id WHERE b.customer_id = {_KEY_CUSTOMER}\n"
        f"ORDER BY position")


@dataclass
class ChargedRead:
    """What a served read's statement found: the key (None: no key has the digest), the
    balance after its charge (None: not charged), the status its activity entry says (None:
    none written), the six window values, and the object (None: no such id, whatever its mode
    or customer) with, for a batch, its scans' rows (the columns of ``BATCH_SCANS``)."""

    key: ApiKey | None
    balance: int | None = None
    entry_status: int | None = None
    windows: tuple = ()
    found: Scan | BulkBatch | None = None
    entries: list[tuple] = field(default_factory=list)


@dataclass(frozen=True)
class ReadCharge:
    """What a served read charges and writes, beside its key's rules' values: ``price``, added
    to the row of ``reason`` (``balances.add_read``) with the note ``notes`` names for the
    object not found, the key's customer's, another's; the activity entry ``entry`` (its id,
    action, resource id, client address and request id) whose status is one of ``statuses``
    (not found, the customer's, another's, as ``notes``; the balance short)."""

    price: int
    reason: str
    notes: tuple[str | None, str | None, str | None]
    entry: tuple[str, str, str | None, str | None, str | None]
    statuses: tuple[int, int, int, int]


def read_charged(*, bulk: bool, token_digest: str, object_id: str, rules: tuple[str, ...], rule_values: dict,
                 charge: ReadCharge, now: datetime, starts: tuple[datetime, datetime]) -> ChargedRead:
    """Run the served read (``served_read_sql``): find the key by ``token_digest``; charge it
    (``charge``, at ``now``) if it passes ``rules`` with ``rule_values`` (the named parameters
    of ``keys.KEY_CONDITIONS``) and its balance covers the price; read its windows starting at
    ``starts`` and the object ``object_id``. For such a key (charged or short of credit) it
    writes the call's activity entry at ``now``."""
    not_found, owned, other = charge.notes
    entry_id, action, resource_id, entry_address, request_id = charge.entry
    status_missing, status_owned, status_other, status_short = charge.statuses
    params = {**rule_values, **window_times(starts),
              "digest": token_digest, "object_id": object_id, "price": charge.price, "delta": -charge.price,
              "reason": charge.reason, "note_missing": not_found, "note_owned": owned, "note_other": other,
              "now": now, "minute": minute_of(now), "entry_id": entry_id, "action": action,
              "resource_id": resource_id, "entry_address": entry_address, "request_id": request_id,
              "status_missing": status_missing, "status_owned": status_owned, "status_other": status_other,
              "status_short": status_short}
    # Through its function (planned once per server connection): a digest no key has finds
    # nothing and writes nothing.
    rows = execute_planned(served_read_sql(bulk, rules), params, probe={**params, "digest": ""}).fetchall()
    if not rows:
        return ChargedRead(None)
    n = KEY_ROW_LENGTH
    first = rows[0]
    read = ChargedRead(key_from_row(first), first[n], first[n + 1], tuple(first[n + 2:n + _WINDOWS]))
    if bulk:
        values = first[n + _WINDOWS:n + _WINDOWS + _BATCH_WIDTH]
        read.found = instance(BulkBatch, values) if values[0] is not None else None
        read.entries = [row[n + _WINDOWS + _BATCH_WIDTH:-1] for row in rows[1:]]
    else:
        values = first[n + _WINDOWS:]
        read.found = instance(Scan, values) if values[0] is not None else None
    return read
