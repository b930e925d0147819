"""The held phase's clients (``bench.held``): thousands of waits and event streams at once,
on one asyncio loop in a process of its own (its CPU apart from the server's).

    python -m bench.held_clients PLAN.json RESULT.json

PLAN: ``{"url", "waits": [[key, scan_id], ...], "streams": [[key, [scan_id, ...]], ...],
"wait": 60, "deadline_s", "open_per_s"}``. Each wait is ``GET /api/v1/scan/{id}?wait=N``, asked again while
its answer is not final (as a client does); each stream is ``GET /api/v1/events/stream`` read
until it has seen ``scan.completed`` (or failed) of every one of its scans. Writes
``"open"`` on stdout once every wait and stream has been sent and answered its first bytes, and
RESULT at the end: per wait the unix time of its final answer, per stream and scan the time its
final event arrived, and every error.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from urllib.parse import urlsplit

FINAL = ("completed", "failed")


class Client:
    def __init__(self, plan: dict):
        parts = urlsplit(plan["url"])
        self.host, self.port = parts.hostname, parts.port
        self.plan = plan
        self.opened = 0
        self.all_open = asyncio.Event()
        self.errors: list[str] = []
        self.wait_answers: list[dict] = []
        self.stream_finals: list[dict] = []
        self.statuses: dict[int, int] = {}

    def _opened(self) -> None:
        self.opened += 1
        if self.opened == len(self.plan["waits"]) + len(self.plan["streams"]):
            self.all_open.set()

    async def _send(self, path: str, key: str, accept: str = "application/json"):
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 20)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAuthorization: Bearer {key}\r\n"
                     f"Accept: {accept}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return reader, writer

    async def _head(self, reader) -> tuple[int, dict]:
        status = int((await reader.readline()).split()[1])
        self.statuses[status] = self.statuses.get(status, 0) + 1
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    async def wait(self, key: str, scan_id: str) -> None:
        first = True
        try:
            while True:
                reader, writer = await self._send(f"/api/v1/scan/{scan_id}?wait={self.plan['wait']}", key)
                if first:
                    self._opened()  # sent: the server holds it (or answers at once)
                    first = False
                status, headers = await self._head(reader)
                body = json.loads(await reader.readexactly(int(headers.get("content-length", 0))))
                writer.close()
                if status != 200:
                    self.errors.append(f"wait {status} {body.get('error')}")
                    await asyncio.sleep(1)
                    continue
                if body["status"] in FINAL:
                    self.wait_answers.append({"scan_id": scan_id, "at": time.time()})
                    return
        except Exception as exc:  # counted, not raised: one client's failure is a figure
            self.errors.append(f"wait {exc.__class__.__name__}: {exc}")

    async def stream(self, key: str, scan_ids: list[str]) -> None:
        left, last = set(scan_ids), None
        first = True
        while left:
            try:
                path = "/api/v1/events/stream" + (f"?after={last}" if last else "")
                reader, writer = await self._send(path, key, "text/event-stream")
                if first:
                    self._opened()
                    first = False
                status, headers = await self._head(reader)
                if status != 200:
                    self.errors.append(f"stream {status}")
                    writer.close()
                    await asyncio.sleep(1)
                    continue
                buffer, event = b"", {}
                while left:
                    size = int((await reader.readline()).strip() or b"0", 16)  # chunked
                    if size == 0:
                        break
                    buffer += await reader.readexactly(size)
                    await reader.readexactly(2)
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        text = line.decode()
                        if text.startswith("id: "):
                            last = text[4:]
                        elif text.startswith("event: "):
                            event["kind"] = text[7:]
                        elif text.startswith("data: "):
                            if event.get("kind") in ("scan.completed", "scan.failed"):
                                scan_id = json.loads(text[6:])["scan_id"]
                                if scan_id in left:
                                    left.discard(scan_id)
                                    self.stream_finals.append({"scan_id": scan_id, "at": time.time()})
                            event = {}
                writer.close()
            except Exception as exc:
                self.errors.append(f"stream {exc.__class__.__name__}: {exc}")
                await asyncio.sleep(1)

    async def run(self) -> None:
        calls = [self.wait(key, scan_id) for key, scan_id in self.plan["waits"]]
        calls += [self.stream(key, ids) for key, ids in self.plan["streams"]]
        calls = [calls[i] for i in sorted(range(len(calls)), key=lambda i: (i * 7919) % len(calls))]  # mixed
        tasks = []
        for i, call in enumerate(calls):  # clients arrive over a few seconds, not in one instant
            tasks.append(asyncio.create_task(call))
            if i % 100 == 99:
                await asyncio.sleep(100 / self.plan["open_per_s"])
        await self.all_open.wait()
        print("open", flush=True)
        done, pending = await asyncio.wait(tasks, timeout=self.plan["deadline_s"])
        for task in pending:
            task.cancel()
        self.unfinished = len(pending)


def main(argv=None) -> int:
    plan_path, result_path = (argv or sys.argv[1:])[:2]
    client = Client(json.loads(open(plan_path).read()))
    asyncio.run(client.run())
    with open(result_path, "w") as out:
        json.dump({"waits": client.wait_answers, "streams": client.stream_finals, "errors": client.errors[:50],
                   "error_count": len(client.errors), "statuses": client.statuses,
                   "unfinished": client.unfinished}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
