"""Python CPU per read in one process: the floor's view against ours (``python -m bench.inprocess``).

Under gunicorn the CPU of a request includes the server's HTTP work and the GIL hand-overs of
16 threads on 2 cores; here each app's WSGI callable is called in a loop from one thread, so
the figure is the app's own Python (``time.process_time``; PostgreSQL's work is on the server
and not counted). Run after an HTTP phase of ``make bench``: it reads one completed scan of
the bench database (``bench.stack.DATABASE_URL``) and one of the floor's, with a key of its own
for each. Ours is measured as served, then without the request's log line and metrics
(``log_and_count``), then also without the request-id, security-header and path-check hooks,
to say what each costs; and the floor is measured again with the service's log line and
metrics added (``app.metrics_http``): what the operators' per-request observability alone
costs a read that does nothing else.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time

from bench.stack import PG_DSN as FLOOR_DSN  # BENCH_DATABASE too

OBSERVABILITY = {"start_clock", "log_and_count"}
OTHER_HOOKS = {"add_request_id", "refuse_oversized_streams", "no_redirects_on_the_api", "answer_api_options",
               "refuse_nul_in_path", "csrf_protect", "docs_security_headers"}


def environ(path: str, token: str) -> dict:
    return {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1:8000", "HTTP_AUTHORIZATION": f"Bearer {token}", "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr, "wsgi.multithread": True,
            "wsgi.multiprocess": True, "wsgi.run_once": False}


def call(app, path: str, token: str) -> str:
    status = []
    b"".join(app(environ(path, token), lambda s, headers, exc_info=None: status.append(s)))
    return status[0]


def ms_per_call(app, path: str, token: str, n: int) -> float:
    answer = call(app, path, token)
    if not answer.startswith("200"):
        raise SystemExit(f"{path}: {answer} (run an HTTP phase of `make bench` first)")
    for _ in range(n // 10):
        call(app, path, token)
    started = time.process_time()
    for _ in range(n):
        call(app, path, token)
    return round((time.process_time() - started) / n * 1000, 3)


def without(app, names: set[str]) -> None:
    for funcs in list(app.before_request_funcs.values()) + list(app.after_request_funcs.values()):
        funcs[:] = [f for f in funcs if f.__name__ not in names]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=3000, help="calls per measure (default 3000)")
    opts = p.parse_args(argv)
    from bench.stack import DATABASE_URL, ENGINE_TOKEN, REDIS_URL, SECRET_KEY
    os.environ.update(APP_ENV="production", SECRET_KEY=SECRET_KEY, DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL,
                      ENGINE_TOKEN=ENGINE_TOKEN, ENGINE_URL="http://127.0.0.1:9", LOG_FORMAT="json",
                      PUBLIC_BASE_URL="http://127.0.0.1:8000", FLOOR_DSN=FLOOR_DSN,
                      PROMETHEUS_MULTIPROC_DIR=tempfile.mkdtemp(prefix="bench-inprocess-"))
    import psycopg2
    conn = psycopg2.connect(FLOOR_DSN)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT id, customer_id FROM scan WHERE status = 'completed' AND livemode LIMIT 1")
        scan_id, customer_id = cur.fetchone() or (None, None)
        cur.execute("SELECT id, customer_id FROM floor.scan WHERE body IS NOT NULL LIMIT 1")
        floor_scan, floor_customer = cur.fetchone() or (None, None)
    if scan_id is None or floor_scan is None:
        raise SystemExit("no completed scan in the bench database: run an HTTP phase of `make bench` first")
    sys.stderr = open(os.devnull, "w")  # while the app is built: its log handler keeps this stream
    from app import metrics_http
    from bench import floor_app
    from wsgi import app
    sys.stderr = sys.__stderr__
    metrics_http.init_app(floor_app.app)  # before its first request; taken off again below
    from app.accounts import admin
    from app.plumbing.db import db
    with db.connection_context():
        _, token = admin.issue_key(customer_id, "bench.inprocess")
    name = f"inprocess-{time.time()}"
    floor_token = floor_app.add_customer(FLOOR_DSN, name)
    with conn.cursor() as cur:  # the floor's new key, moved to the customer that owns the scan
        cur.execute("UPDATE floor.api_key SET customer_id = %s WHERE customer_id = %s", (floor_customer, name))
    ours, floor = (f"/api/v1/scan/{scan_id}", token), (f"/api/v1/scan/{floor_scan}", floor_token)
    figures = {"floor with the service's log line and metrics": ms_per_call(floor_app.app, *floor, opts.n)}
    without(floor_app.app, OBSERVABILITY)
    figures["floor"] = ms_per_call(floor_app.app, *floor, opts.n)
    figures["ours"] = ms_per_call(app, *ours, opts.n)
    without(app, OBSERVABILITY)
    figures["ours without the log line and metrics"] = ms_per_call(app, *ours, opts.n)
    without(app, OTHER_HOOKS)
    figures["ours also without the request-id, header and path hooks"] = ms_per_call(app, *ours, opts.n)
    for label, value in figures.items():
        print(f"{label}: {value} ms of Python per read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
