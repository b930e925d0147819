"""Sources (D30): their rows, their answers counted per minute and latency class, what the last
hour and the last day of them add up to."""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from app.plumbing.db import execute, table
from app.sources.models import Source, SourceMinute

_S, _M = table(Source), table(SourceMinute)


def ensure(found: Sequence[tuple[str, str]], now: datetime) -> None:
    """A row for each ``(id, name)`` not known yet (a source first seen in a scan's answer), in id
    order so two transactions never wait on each other in a circle."""
    rows = sorted(dict(found).items())
    if not rows:
        return
    values = ", ".join(["(?, ?, '[]', 'healthy', ?, ?, FALSE, 0, '[]', ?)"] * len(rows))
    execute(f"INSERT INTO {_S} (id, name, kinds, status, status_since, counted_since, quarantined, probe_streak, "
            f"last_probes, created_at) VALUES {values} ON CONFLICT (id) DO NOTHING",
            [v for source_id, name in rows for v in (source_id, name, now, now, now)])


def add_answers(counts: Sequence[tuple[str, datetime, int, int, int]]) -> None:
    """Add ``(source id, minute, latency class, answers, answered)`` to the minutes' counts: one
    statement, in key order."""
    rows = sorted(counts)
    if not rows:
        return
    values = ", ".join(["(?, ?::timestamp, ?::smallint, ?::integer, ?::integer)"] * len(rows))
    execute(f"INSERT INTO {_M} (source_id, minute, bucket, answers, answered) VALUES {values} "
            f"ON CONFLICT (source_id, minute, bucket) DO UPDATE SET answers = {_M}.answers + excluded.answers, "
            f"answered = {_M}.answered + excluded.answered", [v for row in rows for v in row])


def counts_since(since: datetime) -> dict[str, dict[int, tuple[int, int]]]:
    """Each source's ``{latency class: (answers, answered)}`` since ``since``, from its
    ``counted_since`` on."""
    rows = execute(f"SELECT m.source_id, m.bucket, SUM(m.answers), SUM(m.answered) FROM {_M} m "
                   f"JOIN {_S} s ON s.id = m.source_id WHERE m.minute >= ? AND m.minute >= date_trunc('minute', "
                   f"s.counted_since) GROUP BY m.source_id, m.bucket", (since,)).fetchall()
    counts: dict[str, dict[int, tuple[int, int]]] = {}
    for source_id, bucket, answers, answered in rows:
        counts.setdefault(source_id, {})[bucket] = (int(answers), int(answered))
    return counts


def hourly_since(since: datetime) -> dict[str, dict[datetime, tuple[int, int]]]:
    """Each source's ``{hour: (answers, answered)}`` since ``since`` (the status page's day)."""
    rows = execute(f"SELECT source_id, date_trunc('hour', minute) AS hour, SUM(answers), SUM(answered) FROM {_M} "
                   f"WHERE minute >= ? GROUP BY source_id, hour", (since,)).fetchall()
    hours: dict[str, dict[datetime, tuple[int, int]]] = {}
    for source_id, hour, answers, answered in rows:
        hours.setdefault(source_id, {})[hour] = (int(answers), int(answered))
    return hours


def remove_before(before: datetime) -> int:
    return execute(f"DELETE FROM {_M} WHERE minute < ?", (before,)).rowcount


def all_sources() -> list[Source]:
    return list(Source.select().order_by(Source.id))


def get(source_id: str) -> Source | None:
    return Source.get_or_none(Source.id == source_id)


def lock(source_id: str) -> Source | None:
    return Source.select().where(Source.id == source_id).for_update().first()


def quarantined_ids() -> list[str]:
    return [row.id for row in Source.select(Source.id).where(Source.quarantined == True).order_by(Source.id)]  # noqa: E712


def upsert_listed(source_id: str, name: str, kinds: str, probes: str | None, now: datetime) -> None:
    """The engine's listing of a source (E8): its name, kinds and probe identities."""
    execute(f"INSERT INTO {_S} (id, name, kinds, probes, status, status_since, counted_since, quarantined, "
            f"probe_streak, last_probes, created_at) VALUES (?, ?, ?, ?, 'healthy', ?, ?, FALSE, 0, '[]', ?) "
            f"ON CONFLICT (id) DO UPDATE SET name = excluded.name, kinds = excluded.kinds, probes = excluded.probes",
            (source_id, name, kinds, probes, now, now, now))


def update(source_id: str, **fields) -> None:
    Source.update(**fields).where(Source.id == source_id).execute()


def judge_round(source_id: str, sent_at, **fields) -> bool:
    """Write a round's judgement if the round sent at ``sent_at`` is still the one in flight
    (compare-and-set: a worker's periodic look and an operator's probe may judge it at once)."""
    return Source.update(**fields).where(Source.id == source_id, Source.probe_sent_at == sent_at).execute() == 1
