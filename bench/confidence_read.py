"""What findings' confidences cost a served read (D29): statements and Python CPU per read, side by side.

For each read asked (a path with or without ``?min_confidence=``, a scan created with or without its
own ``min_confidence``) it makes one warm-up request, then counts the SQL statements of one (BEGIN
and COMMIT included, as ``bench.queries`` counts them) and times ``n`` more in one thread
(``time.process_time``: the app's own Python; PostgreSQL's work is on the server). All in one
process and one run, so the figures are comparable with each other.

    python -m bench.confidence_read API_KEY SCAN_ID FILTERED_SCAN_ID BULK_ID [N]

(ids of the bench database, as for ``bench.queries``). ``tests/scans/routes/test_confidence.py`` runs
``measure`` on the test database and holds the statement counts equal.
"""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from app.extensions import db


@contextmanager
def counting() -> Iterator[list[str]]:
    """The SQL statements sent while inside (BEGIN, COMMIT and ROLLBACK included); undone after."""
    database = db.obj
    sent: list[str] = []
    originals = {name: getattr(database, name) for name in ("_execute_cursor", "begin", "commit", "rollback")}

    def execute_cursor(sql, params, **kw):
        sent.append(sql)
        return originals["_execute_cursor"](sql, params, **kw)

    def marker(name: str, statement: str):
        def wrapped(*args, **kwargs):
            sent.append(statement)
            return originals[name](*args, **kwargs)
        return wrapped

    database._execute_cursor = execute_cursor
    for name, statement in (("begin", "BEGIN"), ("commit", "COMMIT"), ("rollback", "ROLLBACK")):
        setattr(database, name, marker(name, statement))
    try:
        yield sent
    finally:
        for name, original in originals.items():
            setattr(database, name, original)


def measure(client, headers: dict, paths: dict[str, str], n: int = 100) -> dict[str, dict]:
    """For each named path: status, statements of one read (and by verb), bytes, and Python CPU per
    read in milliseconds over ``n`` reads."""
    report = {}
    for name, path in paths.items():
        client.get(path, headers=headers)  # warm-up: imports, pool, the planned function
        with counting() as sent:
            answer = client.get(path, headers=headers)
        started = time.process_time()
        for _ in range(n):
            client.get(path, headers=headers)
        cpu_ms = (time.process_time() - started) * 1000 / n
        report[name] = {"status": answer.status_code, "sql": len(sent),
                        "by_verb": dict(Counter((s.split() or ["?"])[0].upper() for s in sent)),
                        "bytes": len(answer.get_data()), "cpu_ms_per_read": round(cpu_ms, 3)}
    return report


def table(report: dict[str, dict]) -> str:
    lines = ["| read | HTTP | SQL statements | bytes | Python CPU per read (ms) |", "|---|---|---|---|---|"]
    for name, row in report.items():
        lines.append(f"| {name} | {row['status']} | {row['sql']} {row['by_verb']} | {row['bytes']} | "
                     f"{row['cpu_ms_per_read']} |")
    return "\n".join(lines)


def paths_for(scan_id: str, filtered_id: str, bulk_id: str) -> dict[str, str]:
    return {"read": f"/api/v1/scan/{scan_id}",
            "read ?min_confidence=0.5": f"/api/v1/scan/{scan_id}?min_confidence=0.5",
            "read of a scan with its own min_confidence": f"/api/v1/scan/{filtered_id}",
            "bulk read": f"/api/v1/scan/bulk/{bulk_id}",
            "bulk read ?min_confidence=0.5": f"/api/v1/scan/bulk/{bulk_id}?min_confidence=0.5"}


def main(argv=None) -> int:
    from app import create_app
    args = argv or sys.argv[1:]
    key, scan_id, filtered_id, bulk_id = args[:4]
    n = int(args[4]) if len(args) > 4 else 200
    app = create_app()
    report = measure(app.test_client(), {"Authorization": f"Bearer {key}"}, paths_for(scan_id, filtered_id, bulk_id),
                     n)
    print(table(report), file=sys.stderr)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
