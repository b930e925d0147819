"""The floor: the thinnest Flask code doing the durable work the contract requires per call.

A bare "hello" view is the wrong yardstick for an endpoint whose answer must be durable:
no code can serve a read without authenticating the key, charging a credit with its
ledger row and committing, nor a creation without its admission, the engine call and the
scheduling of its first look. This app does exactly that and nothing else (no
framework beyond Flask, no ORM, no validation beyond what the statements need, no
logging, no metrics, no quota windows, no idempotency), with plain psycopg2, requests
and redis, on its own tables (schema ``floor`` of the same database) and its own Redis
keys (``floor:``), under the same gunicorn settings as the API. The bench reports every
endpoint as a ratio to its floor (``bench.report``).

Per call:
- read ``GET /api/v1/scan/{id}``: one statement (key digest -> customer; balance - 1 if
  >= 1, added to the customer's ledger row of the endpoint and minute, as the service sums
  reads (D24); the call's activity log entry (D20); the stored body of the scan if it is the
  customer's), committed (autocommit: the statement is its own transaction).
- aggregate read ``GET /api/v1/scan/bulk/{id}``: the same statement returning the batch's
  stored entries in order; the body is spliced from them.
- creation ``POST /api/v1/scan``: one admission statement (key -> customer; balance >= 1
  and in flight below the limit; balance - 1, in flight + 1; the scan row; the ledger
  row; the activity log entry with the targets' keyed hashes), committed; the engine call
  (E1); one UPDATE storing the engine id, eta and the first look's due time (D24's batch
  looks claim due scans from the database: no Redis, no job per scan).

The activity entry (D20) is durable work of every authenticated call, so each statement
writes it (a CTE), into a table partitioned by day with the service's indexes; a creation's
says 202 before the engine answers (the floor is never measured failing).
- bulk creation ``POST /api/v1/scan/bulk``: the same with n scans and a batch row in the
  admission statement, one batch engine call, one ``UPDATE ... FROM (VALUES ...)``.

    gunicorn --config gunicorn.conf.py bench.floor_app:app   (FLOOR_DSN, REDIS_URL, ENGINE_URL, ENGINE_TOKEN)
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading

import psycopg2
import redis
import requests
from flask import Flask, Response, request

SCHEMA = """
DROP SCHEMA IF EXISTS floor CASCADE;
CREATE SCHEMA floor;
CREATE TABLE floor.customer (id text PRIMARY KEY, balance bigint NOT NULL, in_flight integer NOT NULL DEFAULT 0,
                             inflight_limit integer NOT NULL);
CREATE TABLE floor.api_key (digest text PRIMARY KEY, id text NOT NULL,
                            customer_id text NOT NULL REFERENCES floor.customer (id));
CREATE TABLE floor.batch (id text PRIMARY KEY, customer_id text NOT NULL REFERENCES floor.customer (id),
                          total integer NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE floor.scan (id text PRIMARY KEY, customer_id text NOT NULL REFERENCES floor.customer (id),
                         bulk_id text REFERENCES floor.batch (id), bulk_index integer, kind text NOT NULL,
                         target text NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL,
                         engine_id text, eta_at timestamptz, next_look_at timestamptz, body text, entry text);
CREATE INDEX floor_scan_bulk ON floor.scan (bulk_id, bulk_index) WHERE bulk_id IS NOT NULL;
-- Due looks, claimed in batches (D24's batch look, as the service's scan_due_look index).
CREATE INDEX floor_scan_due ON floor.scan (next_look_at)
    WHERE status IN ('queued', 'running') AND next_look_at IS NOT NULL;
CREATE TABLE floor.ledger (id bigserial PRIMARY KEY, customer_id text NOT NULL REFERENCES floor.customer (id),
                           delta integer NOT NULL, balance_after bigint NOT NULL, reason text NOT NULL,
                           scan_id text, bulk_id text, created_at timestamptz NOT NULL,
                           note text, minute timestamptz, reads integer);
-- A read's charge is added to its customer's row of the endpoint and minute (the service's D24 rows).
CREATE UNIQUE INDEX floor_ledger_reads_minute ON floor.ledger (customer_id, note, minute) WHERE minute IS NOT NULL;
-- The activity log (D20): one entry per call, partitioned by day with a DEFAULT partition and the
-- service's three indexes (app.activity.models), so an entry costs what the service's costs.
CREATE TABLE floor.activity (id text NOT NULL, created_at timestamptz NOT NULL, customer_id text NOT NULL,
                             livemode boolean NOT NULL, key_id text, user_id text, user_email text,
                             action text NOT NULL, resource_id text, status smallint NOT NULL,
                             credits integer NOT NULL, client_address text, request_id text, purpose text,
                             case_ref text, target_hashes text[], PRIMARY KEY (id, created_at))
    PARTITION BY RANGE (created_at);
CREATE TABLE floor.activity_default PARTITION OF floor.activity DEFAULT;
CREATE INDEX floor_activity_list ON floor.activity (customer_id, livemode, created_at, id);
CREATE INDEX floor_activity_targets ON floor.activity USING GIN (target_hashes) WHERE target_hashes IS NOT NULL;
CREATE INDEX floor_activity_resource ON floor.activity (customer_id, resource_id, created_at)
    WHERE resource_id IS NOT NULL;
"""
# Today's and tomorrow's partitions, as the service's periodic upkeep makes them ahead of need.
DAY_PARTITIONS = """
CREATE TABLE floor.activity_d{n} PARTITION OF floor.activity
    FOR VALUES FROM (date_trunc('day', now()) + interval '{n} day') TO (date_trunc('day', now()) + interval '{m} day');
"""

# The key, the charge added to the minute's row of the endpoint's reads (D24), and the call's
# activity entry (D20: status 200/403/404 by the object's owner, 402 when not charged).
CHARGE = """
WITH k AS (SELECT id AS key_id, customer_id FROM floor.api_key WHERE digest = %(digest)s),
c AS (UPDATE floor.customer SET balance = balance - 1 WHERE id = (SELECT customer_id FROM k) AND balance >= 1
      RETURNING id, balance),
l AS (INSERT INTO floor.ledger AS l (customer_id, delta, balance_after, reason, note, minute, reads, created_at)
      SELECT id, -1, balance, 'reads', %(note)s, date_trunc('minute', now()), 1, now() FROM c
      ON CONFLICT (customer_id, note, minute) WHERE minute IS NOT NULL
      DO UPDATE SET delta = l.delta + excluded.delta, balance_after = excluded.balance_after, reads = l.reads + 1),
o AS (SELECT ({owner}) AS owner),
a AS (INSERT INTO floor.activity (id, created_at, customer_id, livemode, key_id, action, resource_id, status,
                                  credits, client_address, request_id)
      SELECT %(entry)s, now(), k.customer_id, true, k.key_id, %(action)s, %(id)s,
             CASE WHEN c.id IS NULL THEN 402 WHEN o.owner IS NULL THEN 404 WHEN o.owner = c.id THEN 200 ELSE 403 END,
             CASE WHEN c.id IS NULL THEN 0 ELSE 1 END, %(address)s, %(request_id)s
      FROM k CROSS JOIN o LEFT JOIN c ON true)
"""
READ = (CHARGE.format(owner="SELECT customer_id FROM floor.scan WHERE id = %(id)s")
        + """SELECT c.balance, s.body, s.customer_id = c.id FROM c LEFT JOIN floor.scan s ON s.id = %(id)s""")
BULK_READ = CHARGE.format(owner="SELECT customer_id FROM floor.batch WHERE id = %(id)s") + """SELECT c.balance, b.total, b.customer_id = c.id,
       (SELECT string_agg(s.entry, ',' ORDER BY s.bulk_index) FROM floor.scan s WHERE s.bulk_id = b.id),
       (SELECT count(*) FILTER (WHERE s.status = 'completed') FROM floor.scan s WHERE s.bulk_id = b.id)
FROM c LEFT JOIN floor.batch b ON b.id = %(id)s"""
ADMIT = """
WITH k AS (SELECT id AS key_id, customer_id FROM floor.api_key WHERE digest = %(digest)s),
c AS (UPDATE floor.customer SET balance = balance - %(n)s, in_flight = in_flight + %(n)s
      WHERE id = (SELECT customer_id FROM k) AND balance >= %(n)s AND in_flight + %(n)s <= inflight_limit
      RETURNING id, balance),
b AS (INSERT INTO floor.batch (id, customer_id, total, created_at)
      SELECT %(bulk_id)s, id, %(total)s, now() FROM c WHERE %(bulk_id)s IS NOT NULL RETURNING id),
s AS (INSERT INTO floor.scan (id, customer_id, bulk_id, bulk_index, kind, target, status, created_at)
      SELECT v.id, c.id, %(bulk_id)s, v.i, v.kind, v.target, 'queued', now()
      FROM c, unnest(%(ids)s::text[], %(kinds)s::text[], %(targets)s::text[], %(indexes)s::int[])
           AS v(id, kind, target, i)
      WHERE %(bulk_id)s IS NULL OR EXISTS (SELECT 1 FROM b)),
l AS (INSERT INTO floor.ledger (customer_id, delta, balance_after, reason, scan_id, bulk_id, created_at)
      SELECT id, -%(n)s, balance, 'scan', %(scan_id)s, %(bulk_id)s, now() FROM c),
a AS (INSERT INTO floor.activity (id, created_at, customer_id, livemode, key_id, action, resource_id, status,
                                  credits, client_address, request_id, target_hashes)
      SELECT %(entry)s, now(), k.customer_id, true, k.key_id, %(action)s,
             CASE WHEN c.id IS NULL THEN NULL ELSE coalesce(%(bulk_id)s, %(scan_id)s) END,
             CASE WHEN c.id IS NULL THEN 402 ELSE 202 END, CASE WHEN c.id IS NULL THEN 0 ELSE %(n)s END,
             %(address)s, %(request_id)s, CASE WHEN c.id IS NULL THEN NULL ELSE %(hashes)s::text[] END
      FROM k LEFT JOIN c ON true)
SELECT balance FROM c"""
# The engine's id and eta, and the first look's due time (half a second before the eta): batch
# looks claim due scans from the database (D24), so no Redis schedule and no job per scan.
RECORD_ONE = ("UPDATE floor.scan SET engine_id = %s, eta_at = now() + make_interval(secs => %s), "
              "next_look_at = now() + make_interval(secs => greatest(%s - 0.5, 0)) WHERE id = %s")
RECORD_MANY = ("UPDATE floor.scan AS s SET engine_id = v.engine_id, eta_at = now() + make_interval(secs => v.eta), "
               "next_look_at = now() + make_interval(secs => greatest(v.eta - 0.5, 0)) "
               "FROM (VALUES {}) AS v(id, engine_id, eta) WHERE s.id = v.id")
KINDS = ("email", "phone", "username")
# The key of the targets' keyed hashes in a creation's entry (the service derives its own from SECRET_KEY).
TARGET_KEY = hashlib.sha256(b"floor target hashes").digest()

app = Flask(__name__)
_local = threading.local()
_redis = None
_redis_lock = threading.Lock()


class Connection:
    """The thread's own connection (kept open: a pool's hand-over is not part of the work),
    in autocommit: each statement is its own transaction."""

    def __enter__(self):
        global _redis
        conn = getattr(_local, "conn", None)
        if conn is None or conn.closed:
            conn = _local.conn = psycopg2.connect(os.environ["FLOOR_DSN"])
            conn.autocommit = True
        if _redis is None:  # per process, after gunicorn's fork
            with _redis_lock:
                if _redis is None:
                    _redis = redis.Redis.from_url(os.environ["REDIS_URL"])
        return conn.cursor()

    def __exit__(self, *exc):
        return None


def engine() -> requests.Session:
    session = getattr(_local, "engine", None)
    if session is None:
        session = _local.engine = requests.Session()
        session.trust_env = False
        session.headers.update({"Authorization": f"Bearer {os.environ.get('ENGINE_TOKEN', '')}",
                                "Content-Type": "application/json"})
    return session


def error(status: int, code: str) -> Response:
    body = json.dumps({"ok": False, "error": code, "message": code, "request_id": None})
    return Response(body, status, mimetype="application/json")


def key_digest():
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    return hashlib.sha256(header[7:].strip().encode()).hexdigest()


def entry(action: str, resource_id=None) -> dict:
    """The parameters of the call's activity entry (D20) that the statement does not find itself."""
    return {"entry": "act_" + secrets.token_hex(12), "action": action, "address": request.remote_addr,
            "request_id": "req_" + secrets.token_hex(12), "id": resource_id}


def target_hashes(items) -> list[str]:
    """The keyed hashes of a creation's normalised targets, without repeats (the entry's ``target_hashes``)."""
    return list(dict.fromkeys(hmac.new(TARGET_KEY, f"{k}:{t}".encode(), hashlib.sha256).hexdigest()
                              for k, t in items))


def answer(body: str, status: int, balance) -> Response:
    response = Response(body, status, mimetype="application/json")
    response.headers["X-Credits-Remaining"] = str(balance)
    return response


@app.get("/api/v1/scan/<scan_id>")
def read(scan_id):
    digest = key_digest()
    if digest is None:
        return error(401, "unauthorized")
    with Connection() as cur:
        cur.execute(READ, {"digest": digest, "note": "GET /api/v1/scan/{scan_id}", **entry("scan.read", scan_id)})
        row = cur.fetchone()
    if row is None:
        return error(401, "invalid_token")  # or no credit left: the floor does not tell them apart
    balance, body, owned = row
    if body is None:
        return error(404, "not_found")
    if not owned:
        return error(403, "forbidden")
    return answer(body, 200, balance)


@app.get("/api/v1/scan/bulk/<bulk_id>")
def bulk_read(bulk_id):
    digest = key_digest()
    if digest is None:
        return error(401, "unauthorized")
    with Connection() as cur:
        cur.execute(BULK_READ, {"digest": digest, "note": "GET /api/v1/scan/bulk/{bulk_id}",
                                **entry("bulk.read", bulk_id)})
        row = cur.fetchone()
    if row is None:
        return error(401, "invalid_token")
    balance, total, owned, entries, completed = row
    if total is None:
        return error(404, "not_found")
    if not owned:
        return error(403, "forbidden")
    body = (f'{{"ok":true,"bulk_id":"{bulk_id}","total":{total},"completed":{completed},'
            f'"all_done":{"true" if completed == total else "false"},"scans":[{entries or ""}]}}')
    return answer(body, 200, balance)


def _admit(digest, items, bulk_total=None):
    """The admission statement; (balance, scan ids, bulk id) or None when refused."""
    n = len(items)
    ids = ["scn_" + secrets.token_hex(12) for _ in items]
    bulk_id = "blk_" + secrets.token_hex(12) if bulk_total is not None else None
    with Connection() as cur:
        cur.execute(ADMIT, {"digest": digest, "n": n, "bulk_id": bulk_id, "total": bulk_total, "ids": ids,
                            "kinds": [k for k, _ in items], "targets": [t for _, t in items],
                            "indexes": list(range(n)), "scan_id": ids[0] if bulk_id is None else None,
                            "hashes": target_hashes(items),
                            **entry("scan.create" if bulk_total is None else "bulk.create")})
        row = cur.fetchone()
    return None if row is None else (row[0], ids, bulk_id)


def _schedule(ids, answers) -> None:
    """The engine's ids stored with each scan's first look due (one UPDATE)."""
    with Connection() as cur:
        if len(ids) == 1:
            eta = answers[0]["eta_seconds"]
            cur.execute(RECORD_ONE, (answers[0]["id"], eta, eta, ids[0]))
        else:
            values = ",".join(["(%s, %s, %s::float8)"] * len(ids))
            cur.execute(RECORD_MANY.format(values),
                        [v for i, a in zip(ids, answers) for v in (i, a["id"], a["eta_seconds"])])


def _item(item):
    if not isinstance(item, dict):
        return None
    target, kind = item.get("target"), item.get("kind") or "email"
    if not isinstance(target, str) or len(target.strip()) < 3 or kind not in KINDS:
        return None
    return kind, target.strip().lower()


@app.post("/api/v1/scan")
def create():
    digest = key_digest()
    if digest is None:
        return error(401, "unauthorized")
    item = _item(request.get_json(silent=True))
    if item is None:
        return error(400, "invalid_request")
    admitted = _admit(digest, [item])
    if admitted is None:
        return error(402, "refused")
    balance, ids, _ = admitted
    response = engine().post(f"{os.environ['ENGINE_URL']}/v1/investigations",
                             json={"kind": item[0], "target": item[1], "reference": ids[0]}, timeout=10)
    if response.status_code not in (200, 201):
        return error(502, "engine_submit_failed")  # the floor does not refund: it is never measured failing
    submitted = response.json()
    _schedule(ids, [submitted])
    body = json.dumps({"ok": True, "scan_id": ids[0], "kind": item[0], "recipes_to_run": submitted["recipes"],
                       "eta_seconds": submitted["eta_seconds"],
                       "poll_url": f"{request.host_url}api/v1/scan/{ids[0]}"}, separators=(",", ":"))
    return answer(body, 202, balance)


@app.post("/api/v1/scan/bulk")
def bulk_create():
    digest = key_digest()
    if digest is None:
        return error(401, "unauthorized")
    body = request.get_json(silent=True)
    targets = body.get("targets") if isinstance(body, dict) else None
    if not isinstance(targets, list) or not 1 <= len(targets) <= 100:
        return error(400, "invalid_request")
    items = [_item(t) for t in targets]
    accepted = [i for i in items if i is not None]
    admitted = _admit(digest, accepted, len(targets))
    if admitted is None:
        return error(402, "refused")
    balance, ids, bulk_id = admitted
    response = engine().post(f"{os.environ['ENGINE_URL']}/v1/investigations/batch", timeout=10, json={
        "items": [{"kind": k, "target": t, "reference": i} for (k, t), i in zip(accepted, ids)]})
    if response.status_code not in (200, 201):
        return error(502, "engine_submit_failed")
    answers = response.json()["items"]
    _schedule(ids, answers)
    base = request.host_url
    out = json.dumps({"ok": True, "bulk_id": bulk_id, "total": len(targets), "queued": len(ids),
                      "rejected": len(targets) - len(ids),
                      "scans": [{"scan_id": i, "target": t, "kind": k, "poll_url": f"{base}api/v1/scan/{i}"}
                                for (k, t), i in zip(accepted, ids)],
                      "aggregate_poll_url": f"{base}api/v1/scan/bulk/{bulk_id}"}, separators=(",", ":"))
    return answer(out, 202, balance)


@app.get("/floor/ready")
def ready():
    with Connection() as cur:
        cur.execute("SELECT 1")
    _redis.ping()
    return {"ok": True}


# --- set-up, for the harness (not served) ------------------------------------------------

def create_schema(dsn: str) -> None:
    """Schema ``floor`` from scratch (the API's tables in ``public`` are not touched)."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(SCHEMA)
        for n in (0, 1):
            cur.execute(DAY_PARTITIONS.format(n=n, m=n + 1))
    conn.close()


def add_customer(dsn: str, name: str, credits: int = 10 ** 12, inflight_limit: int = 100_000_000) -> str:
    """A floor customer and its key; returns the key (its digest only is stored)."""
    token = "floor_" + secrets.token_urlsafe(32)
    conn = psycopg2.connect(dsn)
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO floor.customer (id, balance, inflight_limit) VALUES (%s, %s, %s)",
                    (name, credits, inflight_limit))
        cur.execute("INSERT INTO floor.api_key (digest, id, customer_id) VALUES (%s, %s, %s)",
                    (hashlib.sha256(token.encode()).hexdigest(), "key_" + secrets.token_hex(12), name))
    conn.close()
    return token


def add_batch(dsn: str, customer: str, aggregate: dict, bodies: dict[str, str]) -> None:
    """A completed batch as the API answered it: ``aggregate`` its aggregate read (parsed),
    ``bodies`` the single-read body text of each of its scans, stored as they are."""
    conn = psycopg2.connect(dsn)
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO floor.batch (id, customer_id, total, created_at) VALUES (%s, %s, %s, now())",
                    (aggregate["bulk_id"], customer, aggregate["total"]))
        cur.executemany(
            "INSERT INTO floor.scan (id, customer_id, bulk_id, bulk_index, kind, target, status, created_at, body, "
            "entry) VALUES (%s, %s, %s, %s, %s, %s, %s, now(), %s, %s)",
            [(e["scan_id"], customer, aggregate["bulk_id"], i, e["kind"], e["target"], e["status"],
              bodies[e["scan_id"]], json.dumps(e, separators=(",", ":"), ensure_ascii=False))
             for i, e in enumerate(aggregate["scans"])])
    conn.close()
