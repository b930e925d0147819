"""Webhook delivery under load (D18): ``python -m bench.webhooks``.

One ``python -m workers --queues webhooks`` process against receivers served by a local
aiohttp server (in this process, on its own event loop thread) that answer 200 after a set
delay, or hang until the attempt's timeout. Uses its own database (``bench_webhooks``) and
Redis db 12, so it can run beside the other phases' ``bench`` / db 11.

- throughput: N deliveries queued at once, receiver latency 0, 50 and 200 ms; deliveries
  per second from the first request to the last delivery marked succeeded;
- isolation (steady): 200 deliveries to a hanging receiver queued first and the worker
  started; once the hanging receiver holds requests, fast deliveries are made at a steady
  rate (default 100/s for 10 s, spread over 10 fast receivers) while the hanging ones wait;
  for the fast ones, p50/p95/max of created-to-received (the delivery row's ``created_at``
  to the receiver seeing the request);
- isolation (burst): the same 200 hanging, then 1,000 fast deliveries queued before the
  worker starts: for the fast ones, p50/p95 from the worker's first request to their arrival,
  and the drain time (that first request to the last fast delivery received).

- endpoints on one host (D22): ``--endpoints`` endpoints (10 per key, the most a key may have)
  all on one receiver host and port, one of them hanging with ``--hanging`` deliveries held;
  then fast deliveries at ``--rate`` for ``--seconds`` to the others in turn, and for them
  created-to-received p50/p95/max, beside the same steady run to a single endpoint on that host
  with nothing hanging (the baseline): the per-endpoint share keeps the hanging one from
  slowing the others although they share its host.

Deliveries are made by the service as test events would be (row, then job), so the module
runs unchanged on the code before the pool (for the "before" figures); the endpoints run needs
the endpoints of D22.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg2

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
DB = "bench_webhooks"
DATABASE_URL = f"postgresql://postgres@{HOST}:5432/{DB}"
REDIS_URL = f"redis://{HOST}:6379/12"
LOG = open(os.environ.get("BENCH_WEBHOOKS_LOG", os.devnull), "ab")
SITES = 21  # 20 fast receiver hosts and a hanging one


class Receivers:
    """``/<name>?delay_ms=N`` answers 200 after N ms; ``/hang`` never answers. Records arrival times."""

    def __init__(self):
        self.arrivals: dict[str, float] = {}
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        ready.wait(10)

    def _serve(self, ready):
        from aiohttp import web
        asyncio.set_event_loop(self.loop)

        async def hook(request):
            self.arrivals[request.headers.get("X-Service-Delivery", "")] = time.time()
            await request.read()
            if request.match_info["name"] == "hang":
                await asyncio.sleep(3600)
            await asyncio.sleep(int(request.query.get("delay_ms", "0")) / 1000)
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_post("/{name}", hook)
        runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(runner.setup())
        self.ports = []
        for _ in range(SITES):  # receiver hosts apart (host:port), as customers' receivers are
            site = web.TCPSite(runner, HOST, 0, backlog=4096)
            self.loop.run_until_complete(site.start())
            self.ports.append(site._server.sockets[0].getsockname()[1])
        ready.set()
        self.loop.run_forever()

    def url(self, name: str, delay_ms: int = 0, site: int = 0) -> str:
        return f"http://{HOST}:{self.ports[site % SITES]}/{name}?delay_ms={delay_ms}"


def env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
    e.update(APP_ENV="development", DATABASE_URL=DATABASE_URL, REDIS_URL=REDIS_URL, SECRET_KEY="bench-webhooks-key",
             LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1", ENGINE_URL=f"http://{HOST}:9")
    e.update({k: str(v) for k, v in extra.items()})
    return e


def reset() -> None:
    admin = psycopg2.connect(f"host={HOST} user=postgres dbname=postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB,))
        if cur.fetchone() is None:
            cur.execute(f"CREATE DATABASE {DB}")
    admin.close()
    conn = psycopg2.connect(f"host={HOST} user=postgres dbname={DB}")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
    conn.close()
    subprocess.run([sys.executable, "-m", "flask", "--app", "wsgi", "db", "upgrade"], cwd=ROOT, env=env(),
                   check=True, capture_output=True)
    import redis
    redis.Redis.from_url(REDIS_URL).flushdb()


MAKE_DELIVERIES = """
import json, sys, time
from app import create_app
from app.plumbing.db import db
from app.accounts import admin
from app.billing import customers
from app.webhooks import key_settings, outbox
create_app()
plan, rate = json.loads(sys.argv[1]), float(sys.argv[2])
ids = []
with db.connection_context():
    keys = []
    for url, count in plan:
        customer = customers.create_customer("bench", "enterprise", 10)
        keys.append((key_settings.issue_key(customer.id, "bench", url)[0], url, count))
    if rate <= 0:  # all rows, then all jobs (a row's job is sent when its transaction commits)
        with db.atomic():
            for key, url, count in keys:
                for _ in range(count):
                    body = outbox.sample_event_body()
                    ids.append((outbox._create_delivery(key, body["event"], body, scan_id=None).id, url))
    else:  # one delivery (row, then job) every 1/rate s, the URLs in turn
        order = [(key, url) for n in range(max(c for _, _, c in keys)) for key, url, c in keys if n < c]
        start = time.monotonic()
        for i, (key, url) in enumerate(order):
            pause = start + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            body = outbox.sample_event_body()
            delivery = outbox._create_delivery(key, body["event"], body, scan_id=None)  # row, then its job
            ids.append((delivery.id, url))
print(json.dumps({"ids": ids}))
"""


MAKE_ENDPOINTS = """
import json, sys
from app import create_app
from app.plumbing.db import db
from app.accounts import admin
from app.billing import customers
from app.webhooks import endpoints
create_app()
urls = json.loads(sys.argv[1])
made = []
with db.connection_context():
    for start in range(0, len(urls), endpoints.MAX_ENDPOINTS):  # a key holds at most 10
        customer = customers.create_customer("bench", "enterprise", 10)
        key, _ = admin.issue_key(customer.id, "bench")
        for url in urls[start:start + endpoints.MAX_ENDPOINTS]:
            created, _ = endpoints.create(key, url=url, events=["scan.completed"])
            made.append((key.id, created["endpoint_id"], url))
print(json.dumps({"endpoints": made}))
"""

ENDPOINT_DELIVERIES = """
import json, sys, time
from app import create_app
from app.plumbing.db import db
from app.accounts.models import ApiKey
from app.webhooks import outbox
create_app()
plan, rate = json.loads(sys.argv[1]), float(sys.argv[2])
ids = []
with db.connection_context():
    found = {}
    for key_id in dict.fromkeys(k for k, _, _ in plan):
        for endpoint in outbox.key_endpoints(ApiKey.get_by_id(key_id)):
            found[endpoint.id] = endpoint
    order = [(found[e], url) for _, e, url in plan]
    start = time.monotonic()
    for i, (endpoint, url) in enumerate(order):
        if rate > 0:  # one delivery (row, then job) every 1/rate s
            pause = start + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        body = outbox.sample_event_body()
        delivery = outbox._create_delivery(endpoint.key, body["event"], body, None, endpoint)  # row, then job
        ids.append((delivery.id, url))
print(json.dumps({"ids": ids}))
"""


def make_endpoints(urls: list[str]) -> list[tuple[str, str, str]]:
    """An endpoint per URL, 10 to a key: ``[(key id, endpoint id, url)]``."""
    out = subprocess.run([sys.executable, "-c", MAKE_ENDPOINTS, json.dumps(urls)], cwd=ROOT, env=env(),
                         check=True, capture_output=True, text=True)
    return [tuple(e) for e in json.loads(out.stdout.strip().splitlines()[-1])["endpoints"]]


def endpoint_deliveries(plan: list[tuple[str, str, str]], rate: float = 0) -> list[tuple[str, str]]:
    """A delivery to each ``(key id, endpoint id, url)`` of ``plan``, in order, all at once or one
    every 1/rate s; returns ``[(delivery id, url)]``."""
    out = subprocess.run([sys.executable, "-c", ENDPOINT_DELIVERIES, json.dumps(plan), str(rate)], cwd=ROOT,
                         env=env(), check=True, capture_output=True, text=True)
    return [tuple(d) for d in json.loads(out.stdout.strip().splitlines()[-1])["ids"]]


def make_deliveries(plan: list[tuple[str, int]], rate: float = 0) -> list[tuple[str, str]]:
    """``[(url, count)]``: a key per URL and ``count`` deliveries each, all rows then all jobs,
    or with ``rate`` one delivery (row, then job) every 1/rate s (a subprocess bound to the
    bench database: this process keeps no app). Returns ``[(delivery id, url)]``."""
    out = subprocess.run([sys.executable, "-c", MAKE_DELIVERIES, json.dumps(plan), str(rate)], cwd=ROOT, env=env(),
                         check=True, capture_output=True, text=True)
    made = json.loads(out.stdout.strip().splitlines()[-1])
    return made["ids"]


def sql(query: str):
    conn = psycopg2.connect(f"host={HOST} user=postgres dbname={DB}")
    with conn.cursor() as cur:
        cur.execute(query)
        rows = cur.fetchall()
    conn.close()
    return rows


def start_worker(**extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "workers", "--queues", "webhooks", "--name", "bench-webhooks"],
                            cwd=ROOT, env=env(**extra), stdout=LOG, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def throughput(receivers, delay_ms: int, n: int, timeout: float) -> dict:
    reset()
    make_deliveries([(receivers.url(f"r{i}", delay_ms, i), n // 20) for i in range(20)])  # 20 receivers
    total = (n // 20) * 20
    proc = start_worker()
    try:
        done = wait(lambda: sql("SELECT count(*) FROM webhook_delivery WHERE status = 'succeeded'")[0][0] >= total,
                    timeout)
        succeeded = sql("SELECT count(*) FROM webhook_delivery WHERE status = 'succeeded'")[0][0]
        first = min(receivers.arrivals.values()) if receivers.arrivals else time.time()
        last = sql("SELECT extract(epoch from max(finished_at)) FROM webhook_delivery")[0][0] or time.time()
    finally:
        stop(proc)
        receivers.arrivals.clear()
    return {"delay_ms": delay_ms, "deliveries": total, "succeeded": succeeded, "finished": done,
            "per_second": round(succeeded / max(1e-3, float(last) - first), 1)}


def _fast_figures(receivers, fast_ids, since) -> dict:
    """``since``: each delivery's start (row created) by id, or one time for all of them."""
    start = (lambda d: float(since[d])) if isinstance(since, dict) else (lambda d: since)
    arrived = [d for d in fast_ids if d in receivers.arrivals]
    waits = [receivers.arrivals[d] - start(d) for d in arrived]
    return {"fast": len(fast_ids), "fast_received": len(waits),
            "p50_s": round(pct(waits, 0.5), 3), "p95_s": round(pct(waits, 0.95), 3),
            "max_s": round(max(waits), 3) if waits else None}


def _all_received(receivers, fast_ids, timeout: float) -> dict:
    """Wait until every one of ``fast_ids`` arrived; each delivery's creation time by id."""
    wait(lambda: all(d in receivers.arrivals for d in fast_ids), timeout)
    return dict(sql("SELECT id, extract(epoch from created_at) FROM webhook_delivery"))


def _taken_figures(receivers, fast_ids, since) -> dict:
    """``_fast_figures``, the arrivals then cleared for the next run."""
    figures = _fast_figures(receivers, fast_ids, since)
    receivers.arrivals.clear()
    return figures


def hanging_then(receivers, hanging: int, timeout: float):
    """Reset, queue ``hanging`` deliveries to the hanging receiver, start the worker and wait
    until the receiver holds requests (the worker's slots it may take are taken)."""
    reset()
    make_deliveries([(receivers.url("hang", 0, SITES - 1), hanging)])
    proc = start_worker(WEBHOOK_TIMEOUT_SECONDS=10)
    wait(lambda: receivers.arrivals, min(timeout, 60))
    time.sleep(1.0)  # the hanging receiver's share fills up
    return proc


def isolation_steady(receivers, hanging: int, rate: float, seconds: float, timeout: float) -> dict:
    """Fast deliveries made at ``rate``/s while ``hanging`` wait on the hanging receiver:
    created-to-received of the fast ones."""
    proc = hanging_then(receivers, hanging, timeout)
    try:
        held = len(receivers.arrivals)
        ids = make_deliveries([(receivers.url(f"fast{i}", 0, i), int(rate * seconds) // 10) for i in range(10)],
                              rate)
        fast_ids = [d for d, _ in ids]
        created = _all_received(receivers, fast_ids, timeout)
    finally:
        stop(proc)
    figures = _taken_figures(receivers, fast_ids, created)
    return {"hanging": hanging, "hanging_held": held, "rate_per_s": rate, "seconds": seconds, **figures}


def isolation_burst(receivers, hanging: int, fast: int, timeout: float) -> dict:
    """``hanging`` then ``fast`` deliveries queued before the worker starts: for the fast ones,
    p50/p95 of the time from the worker's first request (to anyone) to their arrival, and
    the drain time (that first request to the last fast delivery received)."""
    reset()
    ids = make_deliveries([(receivers.url("hang", 0, SITES - 1), hanging)]
                          + [(receivers.url(f"fast{i}", 0, i), fast // 10) for i in range(10)])
    fast_ids = [d for d, url in ids if "/hang" not in url]
    proc = start_worker(WEBHOOK_TIMEOUT_SECONDS=10)
    try:
        wait(lambda: all(d in receivers.arrivals for d in fast_ids), timeout)
    finally:
        stop(proc)
    first = min(receivers.arrivals.values(), default=0.0)
    figures = _taken_figures(receivers, fast_ids, first)
    return {"hanging": hanging, **figures, "drain_s": figures["max_s"]}


def endpoints_on_one_host(receivers, endpoints: int, hanging: int, rate: float, seconds: float,
                          timeout: float) -> dict:
    """``endpoints`` endpoints on one receiver host, the last one hanging when ``hanging`` > 0 (that
    many deliveries queued to it first, and held), then ``rate``/s fast deliveries for ``seconds`` to
    the others in turn: for those, created-to-received p50/p95/max."""
    reset()
    site = 0  # one host and port for every endpoint
    urls = [receivers.url(f"ep{i}", 0, site) for i in range(endpoints - (1 if hanging else 0))]
    made = make_endpoints(urls + ([receivers.url("hang", 0, site)] if hanging else []))
    fast_endpoints = [e for e in made if "/hang" not in e[2]]
    proc = start_worker(WEBHOOK_TIMEOUT_SECONDS=10)
    try:
        held = 0
        if hanging:
            endpoint_deliveries([made[-1]] * hanging)
            wait(lambda: receivers.arrivals, min(timeout, 60))
            time.sleep(1.0)  # the hanging endpoint's share fills up
            held = len(receivers.arrivals)
        total = int(rate * seconds)
        plan = [fast_endpoints[i % len(fast_endpoints)] for i in range(total)]
        fast_ids = [d for d, _ in endpoint_deliveries(plan, rate)]
        created = _all_received(receivers, fast_ids, timeout)
    finally:
        stop(proc)
    figures = _taken_figures(receivers, fast_ids, created)
    return {"endpoints": len(made), "on_one_host": True, "hanging_deliveries": hanging, "hanging_held": held,
            "rate_per_s": rate, "seconds": seconds, **figures}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.webhooks", description=__doc__.splitlines()[0])
    p.add_argument("--deliveries", type=int, default=2000)
    p.add_argument("--delays", default="0,50,200")
    p.add_argument("--hanging", type=int, default=200)
    p.add_argument("--fast", type=int, default=1000, help="fast deliveries of the burst run")
    p.add_argument("--rate", type=float, default=100, help="fast deliveries per second of the steady run")
    p.add_argument("--seconds", type=float, default=10, help="length of the steady run")
    p.add_argument("--endpoints", type=int, default=1000,
                   help="endpoints on one receiver host, one hanging, for the endpoints run (0: skip it)")
    p.add_argument("--only", default=None, help="run only these parts: throughput,steady,burst,endpoints")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    opts = p.parse_args(argv)
    parts = set((opts.only or "throughput,steady,burst,endpoints").split(","))
    receivers = Receivers()
    result: dict = {"throughput": [], "isolation_steady": None, "isolation_burst": None, "endpoints_one_host": None}
    for delay in (int(d) for d in opts.delays.split(",") if d and "throughput" in parts):
        result["throughput"].append(throughput(receivers, delay, opts.deliveries, opts.timeout))
        print(json.dumps(result["throughput"][-1]), flush=True)
    if opts.rate and opts.seconds and "steady" in parts:
        result["isolation_steady"] = isolation_steady(receivers, opts.hanging, opts.rate, opts.seconds, opts.timeout)
        print(json.dumps({"isolation_steady": result["isolation_steady"]}), flush=True)
    if opts.fast and "burst" in parts:
        result["isolation_burst"] = isolation_burst(receivers, opts.hanging, opts.fast, opts.timeout)
        print(json.dumps({"isolation_burst": result["isolation_burst"]}), flush=True)
    if opts.endpoints and opts.rate and opts.seconds and "endpoints" in parts:
        single = endpoints_on_one_host(receivers, 1, 0, opts.rate, opts.seconds, opts.timeout)
        many = endpoints_on_one_host(receivers, opts.endpoints, opts.hanging, opts.rate, opts.seconds, opts.timeout)
        result["endpoints_one_host"] = {
            "single_endpoint": single, "many_endpoints": many,
            # How much slower the others are beside a hanging endpoint than one endpoint alone.
            "p50_ratio": round(many["p50_s"] / single["p50_s"], 2) if single["p50_s"] else None,
            "p95_ratio": round(many["p95_s"] / single["p95_s"], 2) if single["p95_s"] else None}
        print(json.dumps({"endpoints_one_host": result["endpoints_one_host"]}), flush=True)
    if opts.out:
        Path(opts.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
