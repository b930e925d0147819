"""The simulator's callback senders: ``python -m bench.callback_senders``.

The simulator's ``CallbackSender`` (in this process) against a trivial receiver in another
process (``http.server``, HTTP/1.1 so connections are kept alive, threaded, answering 200 after
``--delay-ms``), once per ``--senders`` count:

- burst: ``--investigations`` investigations all past their end, so each one's final is due at
  once: the senders' capacity (callbacks sent per second, from the schedule to the last sent);
- spread: as many investigations started evenly over ``--spread`` seconds, each 1 s long with
  3 recipes (4 changes each): on time, every change is sent; behind, the newest only, the rest
  counted superseded. Reports sent, superseded and how long after the last change it drained.

Nothing else runs (no service, no database); the receiver's own cost is in the figures.
"""
from __future__ import annotations

import argparse
import multiprocessing
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.tracking.simulated.conventions import NORMAL, Plan
from simulator.callbacks import CallbackSender

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPREAD_PLAN = Plan(duration_s=1.0, recipes=3, behaviour=NORMAL)


def receive(port: multiprocessing.Value, delay_ms: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            if delay_ms:
                time.sleep(delay_ms / 1000)  # the receiver's own work
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    port.value = httpd.server_port
    httpd.serve_forever()


def drain(sender: CallbackSender, timeout_s: float = 600.0) -> float:
    """Seconds until nothing is left to send (polled every 10 ms)."""
    started = time.monotonic()
    while sender.state()["scheduled"] and time.monotonic() - started < timeout_s:
        time.sleep(0.01)
    return time.monotonic() - started


def burst(url: str, senders: int, n: int) -> dict:
    sender = CallbackSender(SECRET, lambda engine_id: False, senders)
    ended = time.time() - 10  # every investigation already past its end: one final each, due now
    started = time.monotonic()
    for i in range(n):
        sender.schedule(f"inv_{i}", None, url, SPREAD_PLAN, ended)
    drain(sender)
    took = time.monotonic() - started  # from the first scheduled to the last sent
    state = sender.state()
    return {"senders": senders, "sent": state["sent"], "failed": state["failed"], "seconds": round(took, 2),
            "sent_per_s": round(state["sent"] / took)}


def spread(url: str, senders: int, n: int, spread_s: float) -> dict:
    sender = CallbackSender(SECRET, lambda engine_id: False, senders)
    t0 = time.time() + 0.5
    for i in range(n):
        sender.schedule(f"inv_{i}", None, url, SPREAD_PLAN, t0 + spread_s * i / n)
    last_change = t0 + spread_s + SPREAD_PLAN.duration_s
    drain(sender)
    state = sender.state()
    return {"senders": senders, "changes": 4 * n, "sent": state["sent"], "superseded": state["superseded"],
            "failed": state["failed"], "drained_after_last_change_s": round(time.time() - last_change, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.callback_senders", description=__doc__.split("\n")[0])
    parser.add_argument("--investigations", type=int, default=5000)
    parser.add_argument("--senders", default="1,8", help="comma-separated sender counts")
    parser.add_argument("--spread", type=float, default=3.0, help="seconds over which the spread run starts them")
    parser.add_argument("--delay-ms", type=int, default=0, help="the receiver's time to answer")
    args = parser.parse_args(argv)
    port = multiprocessing.Value("i", 0)
    receiver = multiprocessing.Process(target=receive, args=(port, args.delay_ms), daemon=True)
    receiver.start()
    while not port.value:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{port.value}/hook"
    try:
        for count in (int(c) for c in args.senders.split(",")):
            print("burst ", burst(url, count, args.investigations), flush=True)
            print("spread", spread(url, count, args.investigations, args.spread), flush=True)
    finally:
        receiver.terminate()
        receiver.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
