"""The listening session for stored events' announcements (D27): ``LISTEN`` on the channel
``app.events.statements.stored.add`` notifies, on a connection of its own (``DATABASE_DIRECT_URL``: a
pooler in transaction mode cannot keep a LISTEN), outside the pool.

The announcements are a signal only: the stored events and scans are the truth, so a lost one
delays a waiter (which reads again every few seconds anyway), never loses anything.
"""
from __future__ import annotations

import selectors
from collections.abc import Callable

import psycopg2
import psycopg2.extensions

from app.events.statements.stored import CHANNEL
from app.plumbing.db import connect_args


class Listening:
    """One LISTEN session; ``receive`` waits up to ``timeout`` seconds for announcements."""

    def __init__(self, url: str):
        self._conn = psycopg2.connect(**_connect_args(url))
        self._conn.set_isolation_level(psycopg2.extensions.ISOLATION_LEVEL_AUTOCOMMIT)
        with self._conn.cursor() as cursor:
            cursor.execute(f'LISTEN "{CHANNEL}"')
        # Not select.select: it refuses a descriptor above 1023, which a server holding thousands
        # of connections gives this session (the listener then failed and reconnected in a loop).
        # Under gevent the default selector is gevent's, so the wait yields to other greenlets.
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._conn, selectors.EVENT_READ)

    def receive(self, timeout: float, each: Callable[[str], None]) -> None:
        """Call ``each`` with the payload of every announcement that arrives within ``timeout``
        (none: returns after it); a broken session raises the driver's error."""
        if not self._selector.select(timeout):
            return
        self._conn.poll()
        while self._conn.notifies:
            each(self._conn.notifies.pop(0).payload)

    def close(self) -> None:
        self._selector.close()
        try:
            self._conn.close()
        except psycopg2.Error:
            pass


def _connect_args(url: str) -> dict:
    """psycopg2's arguments for ``url``, as the pool reads it (``app.plumbing.db.connect_args``: several hosts
    and ``target_session_attrs`` go to libpq, so a session reopened after a failover finds the new primary)."""
    args = dict(connect_args(url))
    args.setdefault("connect_timeout", 5)
    return args
