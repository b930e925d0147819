"""The statements that move a scan through its states (D5, D13): the batch looks' claims and
records (D24), the final states, and the recovery sweep's repairs.

Every state change is a compare-and-set: the UPDATE names the states (``statuses``) and, for a
look's record, the ``look_generation`` (the fencing token) it expects, and says which rows it
changed. Which states count as in flight is the services' rule (``app.tracking.states``,
``app.recovery``), passed in here.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from peewee import fn

from app.plumbing.db import columns, db, execute, in_list, instance, table
from app.scans.models import Scan


def commit_without_flush() -> None:
    """Inside a transaction: its COMMIT does not wait for PostgreSQL to flush it to disk."""
    db.execute_sql("SET LOCAL synchronous_commit = off")


# The final states of a batch look, in one statement (not one per scan: a batch of 100 finals was
# 100 UPDATEs, each parsed and planned, since statements are sent as text, D19). A completion
# stores its result and counts every recipe done; a failure its code and message; each only
# when the scan is still in one of the states named (the compare-and-set: a scan final already
# is left as it is and not returned). The rows come back as written. ``locked`` takes the rows in
# id order first, so two transactions finishing overlapping sets never wait on each other in a
# circle (a batch look's scans are its claim's already: taking them again costs nothing).
FINISH = f"""
WITH locked AS MATERIALIZED (SELECT id FROM {table(Scan)} WHERE id = ANY(?::varchar[]) ORDER BY id FOR UPDATE)
UPDATE {table(Scan)} AS s SET status = v.status, last_checked_at = ?,
       completed_at = CASE WHEN v.completed THEN ? ELSE s.completed_at END,
       failed_at = CASE WHEN v.completed THEN s.failed_at ELSE ? END,
       result_json = CASE WHEN v.completed THEN v.result_json ELSE s.result_json END,
       recipes_done = CASE WHEN v.completed THEN s.recipes_total ELSE s.recipes_done END,
       failure_code = CASE WHEN v.completed THEN s.failure_code ELSE v.code END,
       failure_message = CASE WHEN v.completed THEN s.failure_message ELSE v.message END
FROM (VALUES %s) AS v(id, status, completed, result_json, code, message) JOIN locked ON locked.id = v.id
WHERE s.id = v.id AND s.status IN %s
RETURNING {columns(Scan, "s")}"""
FINISH_ROW = "(?, ?::varchar, ?::boolean, ?::text, ?::varchar, ?::text)"


def finish(finals: Sequence[tuple], *, statuses: Sequence[str], completed: str, now: datetime) -> list[Scan]:
    """Make each scan of ``finals`` final, if it is still in one of ``statuses``: ``(scan id,
    status, result_json, failure code, failure message)``, where a ``completed`` one stores its
    result and counts every recipe done and any other status stores its code and message. The
    scans as written (those that were final already are left out), in id order."""
    if not finals:
        return []
    sql = FINISH % (", ".join([FINISH_ROW] * len(finals)), in_list(statuses))
    params = [sorted(final[0] for final in finals), now, now, now]
    for scan_id, status, result_json, code, message in finals:
        params += [scan_id, status, status == completed, result_json, code, message]
    rows = execute(sql, [*params, *statuses]).fetchall()
    return sorted((instance(Scan, row) for row in rows), key=lambda scan: scan.id)


def give_due_times(*, statuses: Sequence[str], now: datetime, scan_id: str | None = None) -> list[str]:
    """Make every submitted scan in ``statuses`` that has no due look (only ``scan_id`` if given)
    due ``now`` (a scan an RQ job chain tracked before the upgrade that retired them, D24),
    clearing its chain's token; the ids of those it changed. One statement: a scan given one by
    another sweep at the same moment is not changed twice."""
    where = Scan.status.in_(statuses) & Scan.engine_id.is_null(False) & Scan.next_look_at.is_null()
    if scan_id is not None:
        where &= Scan.id == scan_id
    query = Scan.update(next_look_at=now, tracking_job_id=None).where(where).returning(Scan.id)
    return [row.id for row in query.execute()]


def unsubmitted(*, status: str, created_before: datetime) -> list[Scan]:
    """Scans in ``status`` (queued) never recorded as submitted, created before ``created_before``."""
    return list(Scan.select().where((Scan.status == status) & Scan.engine_id.is_null()
                                    & (Scan.created_at < created_before)))


# --- batch looks (D24) ------------------------------------------------------------------------

# No write: the claim is the row locks of the transaction the look runs in (the caller's). Two
# claims never take one scan (SKIP LOCKED), and a looker that dies ends its transaction, so its
# scans are due again at once; ``idle_in_transaction_session_timeout`` ends the claim of a looker
# that hangs. A look then writes each scan once (the record below), not a lease and a record.
#
# ``enable_sort = off`` (for the claim's statement): the claim must walk the due index in order
# and stop at ``limit``. With statistics that see few rows due (a burst of new scans, a table not
# yet analysed), the planner would rather fetch every due row and sort them all, wide rows
# under ``FOR UPDATE``: 100 ms a claim, spilled to disk, at 37,000 due (the scale phase).
# The setting is put back as soon as the claim has its rows (``SORTS_BACK``): any later statement
# of the look that sorts (the customers' locks in order, the events in id order) was otherwise
# costed above ``jit_above_cost`` by the disabled sort and compiled by the JIT, with inlining and
# optimisation, at each run: 100-350 ms of the server's CPU a statement, about 3 ms a completed
# scan at 25,000 in flight (docs/performance.md, round 12), for statements that run in a millisecond.
CLAIM_DUE = f"""
SET LOCAL idle_in_transaction_session_timeout = %d; SET LOCAL enable_sort = off;
SELECT next_look_at, {columns(Scan)} FROM {table(Scan)}
WHERE status IN %s AND next_look_at IS NOT NULL AND next_look_at <= ?
ORDER BY next_look_at LIMIT ? FOR UPDATE SKIP LOCKED"""
SORTS_BACK = "SET LOCAL enable_sort TO DEFAULT"


def claim_due(*, statuses: Sequence[str], now: datetime, limit: int,
              hold_seconds: float) -> list[tuple[datetime, Scan]]:
    """Inside the caller's transaction: lock up to ``limit`` scans in ``statuses`` due by ``now``,
    earliest first, and return each one's due time and row. Rows another claim holds are
    skipped, not waited for: any number of lookers share the due scans. The claim lasts until
    the transaction ends, or until the session has been idle in it for ``hold_seconds``
    (PostgreSQL then ends the session: the claim of a looker that hangs)."""
    sql = CLAIM_DUE % (max(1, int(hold_seconds * 1000)), in_list(statuses))
    rows = execute(sql, (*statuses, now, limit)).fetchall()
    execute(SORTS_BACK)
    return [(row[0], instance(Scan, row[1:])) for row in rows]


# ``last_checked_at`` is set by the final states only: ``next_look_at`` says all a look needs. A
# scan the engine started moves to ``running`` in the same UPDATE (one row version per look, not
# two); ``was`` is the row as the statement found it (a FROM item sees the row before the
# UPDATE), to say which ones moved now.
RECORD_LOOKS = f"""
UPDATE {table(Scan)} AS s SET next_look_at = v.next_look_at, check_errors = v.check_errors,
       look_generation = s.look_generation + 1,
       recipes_total = COALESCE(v.recipes_total, s.recipes_total),
       recipes_done = COALESCE(v.recipes_done, s.recipes_done),
       status = CASE WHEN v.running AND s.status = ? THEN ? ELSE s.status END,
       started_at = CASE WHEN v.running AND s.status = ? THEN ? ELSE s.started_at END
FROM (VALUES %s) AS v(id, generation, next_look_at, check_errors, recipes_total, recipes_done, running)
     JOIN {table(Scan)} AS was ON was.id = v.id
WHERE s.id = v.id AND s.look_generation = v.generation AND s.next_look_at IS NOT NULL AND s.status IN %s
RETURNING s.id, (v.running AND was.status = ?)"""
RECORD_ROW = "(?, ?::integer, ?::timestamp, ?::integer, ?::integer, ?::integer, ?::boolean)"


def record_looks(looks: Sequence[tuple], *, statuses: Sequence[str], queued: str, running: str,
                 now: datetime) -> list[tuple[str, bool]]:
    """Write what each look saw in one UPDATE: ``(scan id, look_generation as claimed,
    next_look_at, check_errors, recipes_total or None, recipes_done or None, whether the engine
    runs it)``, each only to a scan still in ``statuses`` whose ``look_generation`` (the looks
    recorded) is still the one claimed and that still has a due look, adding one to it;
    a ``queued`` scan the engine runs becomes ``running``, started ``now``. Returns each
    written scan's id and whether it became ``running`` now. The claim's lock makes the
    generation check hold; it stays so that a record made without one writes nothing over a
    later look."""
    if not looks:
        return []
    sql = RECORD_LOOKS % (", ".join([RECORD_ROW] * len(looks)), in_list(statuses))
    params = [queued, running, queued, now, *(v for look in looks for v in look), *statuses, queued]
    return [(row[0], bool(row[1])) for row in execute(sql, params).fetchall()]


# The queued scans a callback said the engine runs (``engine_started_at``, E7), moved to running,
# started when the callback said: up to ``limit``, skipping those a look's claim holds (that look
# moves or ends them itself), the earliest reported first along the partial index
# ``scan_start_reported``, which holds only them. The rows are written by their ids (``= ANY`` of
# the locked ones: the primary key). Joined to the locked rows with the status checked again, the
# planner, with statistics that saw few scans in flight (a burst of new scans), read every scan in
# flight along ``scan_in_flight_customer`` to find them: 12 ms a move, 1.5 ms of PostgreSQL's CPU
# per scan at 25,000 in flight (docs/performance.md, round 13). No check is lost: a row locked
# here was ``queued`` in its newest version (``FOR UPDATE`` checks it again), and nothing else can
# write it before this transaction ends.
MOVE_REPORTED_STARTS = f"""
UPDATE {table(Scan)} AS s SET status = ?, started_at = s.engine_started_at
WHERE s.id = ANY(ARRAY(
    SELECT id FROM {table(Scan)} WHERE status = ? AND engine_started_at IS NOT NULL
    ORDER BY engine_started_at LIMIT ? FOR UPDATE SKIP LOCKED))
RETURNING {columns(Scan, "s")}"""


def move_reported_starts(*, queued: str, running: str, limit: int) -> list[Scan]:
    """Inside the caller's transaction: move up to ``limit`` ``queued`` scans that a callback said
    the engine runs to ``running``, started when it said so. The scans as written, in id order."""
    rows = execute(MOVE_REPORTED_STARTS, (running, queued, limit)).fetchall()
    return sorted((instance(Scan, row) for row in rows), key=lambda scan: scan.id)


def next_due(*, statuses: Sequence[str]) -> datetime | None:
    """The earliest due look of a scan in ``statuses`` (the partial index's first entry)."""
    return (Scan.select(fn.MIN(Scan.next_look_at))
            .where(Scan.status.in_(statuses) & Scan.next_look_at.is_null(False)).scalar())
