"""Work after commit (``app.plumbing.db.after_commit``): run once when the outermost transaction of the
thread's connection commits, dropped with a rollback or with the savepoint it was registered in,
at once outside a transaction, and never an exception into a caller whose transaction committed."""
from __future__ import annotations

import logging
import threading

import pytest

from app.extensions import db
from app.plumbing.db import CONNECTION_ERRORS, after_commit, transaction, transaction_with_known_outcome


class Boom(Exception):
    pass


def rolled_back(body) -> None:
    """``body()`` in a transaction (a savepoint inside another) that ends with an exception."""
    try:
        with transaction():
            body()
            raise Boom
    except Boom:
        pass


@pytest.fixture
def conn(app):
    with db.connection_context():
        yield


def test_outside_a_transaction_the_work_runs_at_once(conn):
    sent = []
    after_commit(sent.append, 1)
    assert sent == [1]


def test_a_commit_runs_the_work_once_after_it_and_a_rollback_drops_it(conn):
    sent = []
    with transaction():
        after_commit(sent.append, "committed")
        assert sent == []  # not before the COMMIT
    assert sent == ["committed"]
    rolled_back(lambda: after_commit(sent.append, "rolled back"))
    with transaction():
        pass
    assert sent == ["committed"]  # sent once, and the rolled-back one never


def test_the_work_sees_its_transaction_committed(conn, app):
    """The work runs after the COMMIT, outside the transaction: another connection sees the row,
    and a transaction the work opens is its own (its own work runs at its own commit)."""
    from app.accounts.models import Customer
    from app.billing import customers
    seen, inner = [], []

    def work(customer_id):
        found = []
        thread = threading.Thread(target=lambda: found.append(_exists(customer_id)))
        thread.start()
        thread.join()
        seen.append(found[0])
        with transaction():
            after_commit(inner.append, "inner")
        seen.append(db.in_transaction())

    with transaction():
        customer = customers.create_customer("After commit", "business", 1)
        after_commit(work, customer.id)
    assert seen == [True, False] and inner == ["inner"]
    assert Customer.get_by_id(customer.id)


def _exists(customer_id) -> bool:
    from app.accounts.models import Customer
    with db.connection_context():
        return Customer.select().where(Customer.id == customer_id).exists()


def test_a_rolled_back_savepoint_drops_only_its_own_work(conn):
    sent = []

    def savepoint_work():
        after_commit(sent.append, "savepoint")
        with transaction():  # released into the savepoint, so rolled back with it
            after_commit(sent.append, "released inside")
    with transaction():
        after_commit(sent.append, "outer before")
        rolled_back(savepoint_work)  # a savepoint
        with transaction():
            after_commit(sent.append, "released savepoint")
        after_commit(sent.append, "outer after")
        assert sent == []
    assert sent == ["outer before", "released savepoint", "outer after"]


def test_a_savepoint_rolled_back_by_hand_keeps_what_comes_after(conn):
    sent = []
    with transaction(), transaction() as savepoint:
        after_commit(sent.append, "undone")
        savepoint.rollback()
        after_commit(sent.append, "kept")
    assert sent == ["kept"]


def test_each_thread_commits_its_own_work(conn):
    """peewee's connection state is per thread: a commit in one thread sends only its own work."""
    sent, registered, release = [], threading.Event(), threading.Event()

    def other_work():
        after_commit(sent.append, "other")
        registered.set()
        release.wait(10)

    def other():
        with db.connection_context():
            rolled_back(other_work)

    thread = threading.Thread(target=other)
    thread.start()
    assert registered.wait(10)
    with transaction():
        after_commit(sent.append, "mine")
    assert sent == ["mine"]
    release.set()
    thread.join()
    assert sent == ["mine"]  # the other thread rolled back: its work was never sent


def test_failed_work_is_one_line_and_neither_stops_the_rest_nor_reaches_the_caller(conn, caplog):
    sent = []

    def refused(_):
        raise ConnectionError("Redis at 10.0.0.1 refused jane@example.com")

    with caplog.at_level(logging.WARNING, logger="app.plumbing.db"), transaction():
        after_commit(refused, "first")
        after_commit(sent.append, "second")
    assert sent == ["second"]
    lines = [r.getMessage() for r in caplog.records if r.name == "app.plumbing.db"]
    assert len(lines) == 1 and "refused" in lines[0] and "ConnectionError" in lines[0]
    assert "jane" not in lines[0]  # the class only: a message may carry personal data


@pytest.fixture
def reconnected(app):
    """A connection that ``transaction_with_known_outcome`` may replace (outside a context that
    expects the first one back)."""
    db.connect(reuse_if_open=True)
    yield
    db.close()


def test_work_of_a_commit_whose_answer_was_lost_runs_only_if_it_had_committed(reconnected):
    """The connection breaks during COMMIT (``transaction_with_known_outcome``): the work runs
    when the transaction is found committed, and is dropped when it is found not to be."""
    sent = []
    for found_committed in (True, False):
        try:
            with transaction_with_known_outcome(lambda answer=found_committed: answer):
                after_commit(sent.append, found_committed)
                _break_connection_at_commit()
        except CONNECTION_ERRORS:
            assert not found_committed
        else:
            assert found_committed
    assert sent == [True]


def _break_connection_at_commit() -> None:
    """End this connection's server process from another connection: the COMMIT meets a closed link."""
    pid = db.execute_sql("SELECT pg_backend_pid()").fetchone()[0]

    def kill():
        with db.connection_context():
            db.execute_sql("SELECT pg_terminate_backend(%s)", (pid,))
    thread = threading.Thread(target=kill)
    thread.start()
    thread.join()


def test_a_job_enqueued_inside_a_transaction_goes_when_it_commits_and_never_if_it_rolls_back(conn):
    """Every enqueue of ``app.plumbing.jobs`` waits for the commit by itself (as warehouse's tasks do): no
    call site has to remember ``after_commit``, and none can send a job for rows that roll back."""
    from app.plumbing import runtime
    from app.plumbing.jobs import WEBHOOK_QUEUE, delivery_job_id, enqueue_delivery, queue
    runtime.redis().flushdb()
    webhooks = queue(WEBHOOK_QUEUE)
    with transaction():
        assert enqueue_delivery("dlv_committed", delivery_job_id("dlv_committed", 1)) is True
        assert webhooks.count == 0  # not before the COMMIT
    assert webhooks.job_ids == [delivery_job_id("dlv_committed", 1)]
    rolled_back(lambda: enqueue_delivery("dlv_rolled_back", delivery_job_id("dlv_rolled_back", 1)))
    with transaction():
        pass
    assert webhooks.job_ids == [delivery_job_id("dlv_committed", 1)]
    assert enqueue_delivery("dlv_outside", delivery_job_id("dlv_outside", 1)) is True  # outside one: at once
    assert webhooks.count == 2
