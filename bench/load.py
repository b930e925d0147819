"""A small load driver: a thread pool of keep-alive ``requests`` sessions firing a list of calls.

Used by ``tests/reliability/test_load.py``, and by hand against a local server::

    python -m bench.load --url http://127.0.0.1:8000 --key service_live_... --creations 200 --reads 2000

It sends exactly the calls it is given (no retries, a timeout on each), so the number of
requests is known in advance and the run ends by itself. By default it refuses any host but
the loopback interface: it is a test tool, not a way to load someone else's server.
"""
from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass
class Call:
    method: str
    path: str
    headers: dict = field(default_factory=dict)
    json: Any = None
    tag: Any = None  # the caller's label: who sends it and what it expects


@dataclass
class Answer:
    call: Call
    status: int  # 0 when no HTTP answer came back (the error says why)
    body: Any
    headers: dict
    seconds: float
    error: str | None = None
    content_type: str = ""


class LoadDriver:
    """``run(calls)`` sends every call once from ``concurrency`` threads, one keep-alive session each."""

    def __init__(self, base_url: str, concurrency: int = 32, timeout: float = 30.0, allow_remote: bool = False):
        host = urlsplit(base_url).hostname
        if host not in LOOPBACK and not allow_remote:
            raise ValueError(f"refusing to load {host}: only the loopback interface is allowed")
        self.base_url = base_url.rstrip("/")
        self.concurrency = concurrency
        self.timeout = timeout
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=1, max_retries=0)
            session.mount("http://", adapter)
            with self._lock:
                self._sessions.append(session)
        return session

    def _one(self, call: Call) -> Answer:
        started = time.perf_counter()
        try:
            response = self._session().request(call.method, f"{self.base_url}{call.path}", headers=call.headers,
                                               json=call.json, timeout=self.timeout, allow_redirects=False)
        except requests.RequestException as exc:
            return Answer(call, 0, None, {}, time.perf_counter() - started, error=exc.__class__.__name__)
        elapsed = time.perf_counter() - started
        try:
            body = response.json()
        except ValueError:
            body = response.text[:500]
        return Answer(call, response.status_code, body, dict(response.headers), elapsed,
                      content_type=response.headers.get("Content-Type", ""))

    def run(self, calls: list[Call], on_answer=None) -> list[Answer]:
        """Send every call once; ``on_answer(answer)``, when given, runs in the sending thread as each
        answer arrives (a test uses it to inject a fault at a precise point of the run)."""
        def one(call):
            answer = self._one(call)
            if on_answer is not None:
                on_answer(answer)
            return answer
        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="load") as pool:
            return list(pool.map(one, calls))

    def close(self) -> None:
        for session in self._sessions:
            session.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(answers: list[Answer], seconds: float) -> dict:
    """Counts by status and latency figures (milliseconds) of one run."""
    latencies = [a.seconds for a in answers]
    by_status: dict[str, int] = {}
    for answer in answers:
        by_status[str(answer.status)] = by_status.get(str(answer.status), 0) + 1
    return {
        "requests": len(answers),
        "by_status": dict(sorted(by_status.items())),
        "transport_errors": sum(1 for a in answers if a.status == 0),
        "seconds": round(seconds, 2),
        "per_second": round(len(answers) / seconds, 1) if seconds else None,
        "latency_ms": {
            "p50": round(1000 * statistics.median(latencies), 1) if latencies else 0,
            "p95": round(1000 * percentile(latencies, 0.95), 1),
            "p99": round(1000 * percentile(latencies, 0.99), 1),
            "max": round(1000 * max(latencies), 1) if latencies else 0,
        },
    }


def timed_run(driver: LoadDriver, calls: list[Call]) -> tuple[list[Answer], dict]:
    started = time.perf_counter()
    answers = driver.run(calls)
    return answers, summary(answers, time.perf_counter() - started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True, help="an API key with credits")
    parser.add_argument("--creations", type=int, default=200)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--allow-remote", action="store_true", help="allow a host other than loopback")
    args = parser.parse_args(argv)
    headers = {"Authorization": f"Bearer {args.key}"}
    driver = LoadDriver(args.url, args.concurrency, allow_remote=args.allow_remote)
    created, create_stats = timed_run(driver, [Call("POST", "/api/v1/scan", headers, {"target": "jane@example.com"})
                                               for _ in range(args.creations)])
    ids = [a.body["scan_id"] for a in created if a.status == 202] or [f"scn_{secrets.token_urlsafe(16)}"]
    reads = [Call("GET", f"/api/v1/scan/{ids[i % len(ids)] if i % 2 else 'scn_' + secrets.token_urlsafe(16)}",
                  headers) for i in range(args.reads)]
    _, read_stats = timed_run(driver, reads)
    driver.close()
    json.dump({"creations": create_stats, "reads": read_stats}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
