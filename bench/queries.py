"""SQL statements, Redis round trips and engine calls per API request.

Runs the API in process (Flask test client) against the bench database, Redis and
simulator that ``python -m bench`` started, and counts, for one request of each kind
(after a warm-up request): every SQL statement peewee sends (BEGIN and COMMIT
included), every Redis round trip (a pipeline is one) and every engine HTTP call.

    python -m bench.queries API_KEY COMPLETED_SCAN_ID QUEUED_SCAN_ID BULK_ID
"""
from __future__ import annotations

import json
import sys
from collections import Counter

import redis
import redis.client

from app import create_app
from app.extensions import db


class Counting:
    def __init__(self):
        self.sql: list[str] = []
        self.redis = 0
        self.engine = 0

    def reset(self):
        self.sql, self.redis, self.engine = [], 0, 0


def install(counter: Counting) -> None:
    database = db.obj
    original_execute = database._execute_cursor

    def execute_cursor(sql, params, **kw):
        counter.sql.append(sql)
        return original_execute(sql, params, **kw)

    database._execute_cursor = execute_cursor
    for name, statement in (("begin", "BEGIN"), ("commit", "COMMIT"), ("rollback", "ROLLBACK")):
        original = getattr(database, name)

        def wrapped(*args, _original=original, _statement=statement, **kwargs):
            counter.sql.append(_statement)
            return _original(*args, **kwargs)
        setattr(database, name, wrapped)

    command, pipeline_execute = redis.Redis.execute_command, redis.client.Pipeline.execute

    def execute_command(self, *args, **kwargs):
        if not isinstance(self, redis.client.Pipeline):
            counter.redis += 1
        return command(self, *args, **kwargs)

    def execute(self, *args, **kwargs):
        counter.redis += 1
        return pipeline_execute(self, *args, **kwargs)

    redis.Redis.execute_command = execute_command
    redis.client.Pipeline.execute = execute

    from app.plumbing import engine
    call = engine._call

    def engine_call(*args, **kwargs):
        counter.engine += 1
        return call(*args, **kwargs)
    engine._call = engine_call


def verb(sql: str) -> str:
    words = sql.split()
    head = words[0].upper() if words else "?"
    if head == "SELECT" and "FOR UPDATE" in sql.upper():
        return "SELECT FOR UPDATE"
    return head


def main(argv=None) -> int:
    key, done_id, queued_id, batch_id = (argv or sys.argv[1:])[:4]
    app = create_app()
    counter = Counting()
    install(counter)
    client = app.test_client()
    headers = {"Authorization": f"Bearer {key}"}
    targets = [{"target": f"q{i}@example.com", "kind": "email"} for i in range(100)]
    requests_ = {
        "read": ("GET", f"/api/v1/scan/{done_id}", None),
        "read_queued": ("GET", f"/api/v1/scan/{queued_id}", None),
        "bulk_read": ("GET", f"/api/v1/scan/bulk/{batch_id}", None),
        "create": ("POST", "/api/v1/scan", {"target": "queries@example.com", "kind": "email"}),
        "bulk_create": ("POST", "/api/v1/scan/bulk", {"targets": targets}),
    }
    report = {}
    for name, (method, path, body) in requests_.items():
        client.open(path, method=method, json=body, headers=headers)  # warm-up: imports, pool, caches
        counter.reset()
        answer = client.open(path, method=method, json=body, headers=headers)
        verbs = Counter(verb(s) for s in counter.sql)
        report[name] = {"status": answer.status_code, "sql": len(counter.sql), "by_verb": dict(verbs),
                        "redis_round_trips": counter.redis, "engine_calls": counter.engine,
                        "response_bytes": len(answer.get_data())}
        print(f"{name}: HTTP {answer.status_code}, {len(counter.sql)} SQL statements {dict(verbs)}, "
              f"{counter.redis} Redis round trips, {counter.engine} engine calls, "
              f"{len(answer.get_data())} bytes", file=sys.stderr)
        for sql in counter.sql:
            print(f"    {sql[:160]}", file=sys.stderr)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
