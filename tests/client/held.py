"""The server's hold of a ``?wait=N`` read, on frozen time.

The client lets the server wait (``?wait=``): a read is answered as soon as its scan (batch) is final,
else after N seconds. The API in these tests runs in the test process, under freezegun: its wait
would measure frozen time and never end. So while time is frozen, this stands in for the hold:
before the read is sent, the world moves on as it would while the server held it (the jobs and looks
due run, frozen time moves to the next one) until the scan or batch is final or N seconds have passed,
and the read is then answered at once (sent without ``wait``). What the client asked for is kept in
``asked``. The server's own hold is tested on real time (``tests/events/routes/test_waits.py``,
``tests/client/test_events_client.py``).
"""
from __future__ import annotations

import re
from datetime import UTC, datetime

import requests

from app.extensions import db
from app.scans.models import Scan

FINAL = ("completed", "failed")
READ = re.compile(r"/api/v1/scan/(?:bulk/(?P<bulk>[^/?]+)|(?P<scan>[^/?]+))$")


class HeldOnFrozenTime:
    def __init__(self, frozen, jobs):
        self.frozen, self.jobs = frozen, jobs
        self.asked: list[int] = []

    def session(self) -> requests.Session:
        """A session whose reads that wait are held so."""
        held = self

        class Session(requests.Session):
            def request(self, method, url, params=None, **kwargs):
                return super().request(method, url, params=held.hold(url, params), **kwargs)

        return Session()

    def patch(self, monkeypatch) -> None:
        """Every ``requests`` session's reads that wait are held so (for code that makes its own client)."""
        original = requests.Session.request

        def request(session, method, url, params=None, **kwargs):
            return original(session, method, url, params=self.hold(url, params), **kwargs)

        monkeypatch.setattr(requests.Session, "request", request)

    def hold(self, url: str, params):
        """``params`` without ``wait``, once the world has moved on as during the hold it asked for."""
        if not params or "wait" not in params:
            return params
        params = dict(params)
        seconds = int(params.pop("wait"))
        self.asked.append(seconds)
        found = READ.search(url.split("?", maxsplit=1)[0])
        if found:
            self._advance(found, seconds)
        return params

    def _final(self, found) -> bool:
        with db.connection_context():
            if found["bulk"]:
                return not Scan.select().where(Scan.bulk == found["bulk"], Scan.status.not_in(FINAL)).exists()
            scan = Scan.get_or_none(Scan.id == found["scan"])
            return scan is None or scan.status in FINAL

    def _advance(self, found, seconds: int) -> None:
        deadline = datetime.now(UTC).timestamp() + seconds
        for _ in range(10_000):  # each round runs what is due or moves time on: it ends
            self.jobs.run()  # what is due now
            if self._final(found):
                return
            now = datetime.now(UTC).timestamp()
            upcoming = self.jobs.next_scheduled()
            if upcoming is None or upcoming > deadline:
                self.frozen.tick(max(0.0, deadline - now))
                return
            self.frozen.tick(max(0.0, upcoming - now) + 0.001)
