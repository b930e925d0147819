"""``make drill``: the reference cluster (``make cluster``) under bounded load, through four faults.

Starts the cluster, then for each fault: a bounded load (``THREADS`` clients, each a creation or a
read every ``PAUSE`` seconds, through the load balancer) for a few seconds, the fault, the load until
every answer has been normal for ``CALM_SECONDS`` (at most ``FAULT_SECONDS``), then the settling: every
answered creation's scan final. Prints per fault: requests sent, answered, 503, other, seconds to
recover, answered creations found after, scans final, ledger = balance, webhooks received (once each;
duplicates by delivery id counted), and what a client of the event stream that resumes with
``Last-Event-ID`` saw: how often it resumed, and the stored events of the fault's scans it missed (the
gap). Then stops the cluster (as Ctrl-C does).

Faults, in this order: a worker host cut off the network for a minute; an API host killed; the Redis
master killed; the PostgreSQL primary's host killed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster

THREADS, PAUSE = 4, 0.2
BASELINE_SECONDS, CALM_SECONDS, FAULT_SECONDS, SETTLE_SECONDS = 5, 10, 120, 180
LB = f"http://{cluster.addr('lb')}"
SIM = f"http://{cluster.addr('sim')}:8700"
RECEIVER = "drill"
SECRET = "whsec_ZHJpbGwgcmVjZWl2ZXIgc2VjcmV0IDAxMjM0NTY="  # noqa: S105 - the drill's receiver, in the namespaces


def call(method: str, url: str, key: str | None = None, body: dict | None = None, timeout: float = 35):
    """(status, parsed body or None, seconds); status 0 when no HTTP answer came."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - http, built here
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - http, built here
            return answer.status, json.loads(answer.read() or b"null"), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        try:
            parsed = json.loads(exc.read() or b"null")
        except ValueError:
            parsed = None  # not the JSON envelope: counted as "other"
        return exc.code, parsed, time.monotonic() - started
    except Exception:  # no answer: refused, reset, timed out
        return 0, None, time.monotonic() - started


class Load:
    """``THREADS`` clients: creations (one in three calls) and reads of what they created."""

    def __init__(self, key: str, tag: str):
        self.key, self.tag = key, tag
        self.answers: list[tuple[float, int, bool]] = []  # (time, status, envelope-shaped)
        self.created: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(THREADS)]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _client(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            with self._lock:
                mine = self.created[-1] if self.created else None
            if i % 3 == 1 or mine is None:
                status, body, _ = call("POST", f"{LB}/api/v1/scan", self.key,
                                       {"target": f"drill.{self.tag}.{n}.{i}@example.com"})
                if status == 202:
                    with self._lock:
                        self.created.append(body["scan_id"])
            else:
                status, body, _ = call("GET", f"{LB}/api/v1/scan/{mine}", self.key)
            shaped = isinstance(body, dict) and "ok" in body
            if status == 503:
                shaped = shaped and body.get("error") == "service_unavailable"
            with self._lock:
                self.answers.append((time.monotonic(), status, shaped))
            self._stop.wait(PAUSE)

    def normal_since(self, t: float) -> bool:
        with self._lock:
            after = [a for a in self.answers if a[0] >= t]
        return bool(after) and all(status in (200, 202) for _, status, _ in after)

    def last_abnormal(self) -> float | None:
        with self._lock:
            bad = [a[0] for a in self.answers if a[1] not in (200, 202)]
        return bad[-1] if bad else None


class Stream:
    """One client of ``GET /api/v1/events/stream`` through the load balancer, that resumes with
    ``Last-Event-ID`` whenever its connection ends (as the documented client does)."""

    def __init__(self, key: str):
        self.key, self.ids, self.last, self.resumed = key, set(), None, 0
        self._stop = threading.Event()
        self._conn = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(2)
            except OSError:
                pass
        self._thread.join(30)

    def _run(self) -> None:
        import http.client
        while not self._stop.is_set():
            try:
                self._conn = http.client.HTTPConnection(cluster.addr("lb"), 80, timeout=40)
                headers = {"Authorization": f"Bearer {self.key}", "Accept": "text/event-stream"}
                if self.last:
                    headers["Last-Event-ID"] = self.last
                self._conn.request("GET", "/api/v1/events/stream", headers=headers)
                answer = self._conn.getresponse()
                if answer.status == 200:
                    while not self._stop.is_set():
                        line = answer.fp.readline()
                        if not line:
                            break
                        if line.startswith(b"id:"):
                            self.last = line[3:].strip().decode()
                            self.ids.add(self.last)
            except Exception:  # noqa: S110 - cut, refused, timed out: resumed below
                pass
            finally:
                if self._conn is not None:
                    self._conn.close()
            if not self._stop.is_set():
                self.resumed += 1
                self._stop.wait(1)


def events_of(key: str, scan_ids: list[str]) -> set[str]:
    """Every stored event of ``scan_ids``, as ``GET /api/v1/events`` lists them."""
    ids = set()
    for scan_id in scan_ids:
        _, body, _ = call("GET", f"{LB}/api/v1/events?scan_id={scan_id}&limit=100", key)
        ids |= {event["event_id"] for event in (body or {}).get("data", [])}
    return ids


def psql(sql: str, params=()) -> list[tuple]:
    import psycopg2
    conn = psycopg2.connect(cluster.database_url())
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    finally:
        conn.close()


def settle(created: list[str], before: Counter) -> dict:
    """Until every answered creation's scan is final and announced (one webhook each), at most
    SETTLE_SECONDS: a job Redis lost waits for the sweep."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        rows = psql("SELECT status FROM scan WHERE id = ANY(%s)", (created,)) if created else []
        final = sum(status in ("completed", "failed") for (status,) in rows)
        received = webhooks() - before
        if (final == len(created) and len(received) >= len(created)) or time.monotonic() > deadline:
            return {"found": len(rows), "final": final, "received": received}
        time.sleep(2)


def books() -> bool:
    (ledger, balance), = psql("SELECT (SELECT COALESCE(SUM(delta), 0) FROM credit_ledger l "
                              "WHERE l.customer_id = c.id), c.balance FROM customer c WHERE c.name = %s",
                              ("Demo customer",))
    return ledger == balance


def webhooks() -> Counter:
    _, body, _ = call("GET", f"{SIM}/_sim/receivers/{RECEIVER}/deliveries")
    ids = Counter()
    for delivery in (body or {}).get("deliveries", []):
        headers = {k.lower(): v for k, v in delivery["headers"].items()}
        if delivery.get("response_status") == 200:
            ids[headers.get("x-service-delivery")] += 1
    return ids


def run_fault(key: str, name: str, inject, heal=None) -> dict:
    before = webhooks()
    stream = Stream(key).__enter__()
    time.sleep(2)  # connected before the load's first event
    with Load(key, name.split(maxsplit=1)[0].lower()) as load:
        time.sleep(BASELINE_SECONDS)
        at = time.monotonic()
        inject()
        healed = False
        while time.monotonic() - at < FAULT_SECONDS:
            time.sleep(1)
            if heal and not healed and time.monotonic() - at >= 60:
                heal()
                healed = True
            last_bad = load.last_abnormal()
            if (not heal or healed) and (last_bad is None or time.monotonic() - last_bad >= CALM_SECONDS) \
                    and load.normal_since(time.monotonic() - CALM_SECONDS):
                break
        last_bad = load.last_abnormal()
        recovered = round(max(0.0, (last_bad or at) - at), 1)
    statuses = Counter(status for _, status, _ in load.answers)
    other = sum(n for s, n in statuses.items() if s not in (200, 202, 503)) \
        + sum(1 for _, s, shaped in load.answers if s == 503 and not shaped)
    settled = settle(load.created, before)
    received = settled["received"]
    stored = events_of(key, load.created)
    time.sleep(2)  # the last events on the stream's way
    stream.__exit__()
    return {"fault": name, "sent": len(load.answers), "answered": len(load.answers) - statuses.get(0, 0),
            "503": statuses.get(503, 0), "other": other, "recover_s": recovered,
            "created": len(load.created), "found": settled["found"], "final": settled["final"],
            "ledger_eq_balance": books(), "webhooks": sum(received.values()),
            "duplicates": sum(n - 1 for n in received.values() if n > 1),
            "stream_resumed": stream.resumed, "stream_events": len(stored & stream.ids),
            "stream_gap": len(stored - stream.ids)}


def kill(host: str, only: str | None = None) -> None:
    for pid in subprocess.run(["ip", "netns", "pids", cluster.PREFIX + host], capture_output=True,
                              text=True, check=False).stdout.split():
        try:
            if only is None or only in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                subprocess.run(["kill", "-KILL", pid], check=False)
        except OSError:
            pass


def link(host: str, state: str) -> None:
    subprocess.run(["ip", "netns", "exec", cluster.PREFIX + host, "ip", "link", "set", f"eth-{host}", state],
                   check=True)


def drill(key: str) -> list[dict]:
    status, _, _ = call("POST", f"{SIM}/_sim/receivers/{RECEIVER}", body={"secret": SECRET, "responses": [200]})
    if status not in (200, 201):
        raise RuntimeError(f"the simulator's receiver: HTTP {status}")
    hooked = subprocess.run([sys.executable, "-c", cluster.WEBHOOK.format(url=f"{SIM}/_sim/hooks/{RECEIVER}",
                                                                          secret=SECRET)],
                            cwd=cluster.ROOT, env=cluster.app_env("admin"), capture_output=True, text=True,
                            check=False, timeout=60)
    if hooked.returncode != 0:
        raise RuntimeError(f"the drill key: {hooked.stderr.strip().splitlines()[-1:]}")
    key = hooked.stdout.strip().splitlines()[-1]
    faults = [
        ("worker host cut off for a minute", lambda: link("wrk1", "down"), lambda: link("wrk1", "up")),
        ("API host killed", lambda: kill("api1"), None),
        ("Redis master killed", lambda: kill(_redis_master(), only="redis-server"), None),
        ("PostgreSQL primary's host killed", lambda: kill(cluster.primary()), None),
    ]
    figures = []
    for name, inject, heal in faults:
        figures.append(run_fault(key, name, inject, heal))
        cluster.say(f"{name}: {json.dumps(figures[-1])}")  # as it comes: a later failure keeps it
    return figures


def _redis_master() -> str:
    import redis
    port_host = redis.Redis(host=cluster.addr("lb"), port=26379, socket_timeout=2,
                            decode_responses=True).sentinel_get_master_addr_by_name(cluster.MASTER)
    return next(h for h in ("redis1", "redis2") if cluster.addr(h) == port_host[0])


def main() -> int:
    import os
    import signal
    if os.geteuid() != 0:
        print("error: the cluster's network namespaces need root", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        key = cluster.up(sys.executable)
        cluster.say("up; the drill begins")
        figures = drill(key)
        print(json.dumps(figures, indent=1), flush=True)
        header = ("fault", "sent", "answered", "503", "other", "recover_s", "created", "found", "final",
                  "ledger_eq_balance", "webhooks", "duplicates", "stream_resumed", "stream_events", "stream_gap")
        print(" | ".join(header))
        for row in figures:
            print(" | ".join(str(row[h]) for h in header), flush=True)
        return 0 if all(r["other"] == 0 and r["found"] == r["created"] == r["final"] and r["ledger_eq_balance"]
                        and r["duplicates"] == 0 and r["stream_gap"] == 0 for r in figures) else 1
    except KeyboardInterrupt:
        cluster.say("stopping")
        return 1
    except Exception as exc:
        print(f"error: {exc.__class__.__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        cluster.down()
        cluster.say(f"down: no namespace, process, address or state left (logs in {cluster.LOGS_KEPT})")


if __name__ == "__main__":
    sys.exit(main())
