"""The worker's looker threads (``workers.looker``): how long a turn waits before the next."""
import threading
from datetime import timedelta

import pytest
from freezegun import freeze_time

from app.extensions import db
from app.plumbing.models import utcnow
from app.scans.models import IN_FLIGHT, Scan
from app.tracking.statements import engine_callbacks
from tests.tracking.test_looks import NOW, hold_a_claim, make_scans
from workers.looker import BATCH_LINGER, HELD_WAIT, IDLE_WAIT, Lookers


def test_a_turn_waits_a_little_while_the_due_scans_are_claimed_by_another_looker(app, simulator):
    """Their due times stay in the past while another claim holds them: waiting "until the
    earliest due time" would be no wait at all, and the looker would spin on the database."""
    with db.connection_context(), freeze_time(NOW) as frozen:
        _, scans = make_scans(2)
        frozen.tick(60)
    lookers = Lookers(size=1, stopping=threading.Event(), database=None)
    held, release, done = [], threading.Event(), threading.Event()
    thread = hold_a_claim(10, close_when=release, claimed=held, done=done)
    try:
        assert sorted(held) == sorted(s.id for s in scans)
        with freeze_time(NOW + timedelta(seconds=60)):
            assert lookers.turn() == HELD_WAIT
    finally:
        release.set()
        thread.join(10)
    with freeze_time(NOW + timedelta(seconds=60)):
        assert lookers.turn() == BATCH_LINGER  # claimed and looked at, not a full batch: a pause
        wait = lookers.turn()  # nothing due now: until the next due look, at most IDLE_WAIT
    assert 0 < wait <= IDLE_WAIT


@pytest.mark.config(ENGINE_BATCH_SIZE=2)
def test_after_a_full_batch_the_next_turn_comes_at_once_and_after_a_partial_one_after_a_pause(app, simulator):
    """Scans falling due one by one (callbacks) are looked at together: a batch that was not full
    is followed by ``BATCH_LINGER``, during which more fall due; a full one by the next at once."""
    with db.connection_context(), freeze_time(NOW) as frozen:
        make_scans(3)
        frozen.tick(60)
        lookers = Lookers(size=1, stopping=threading.Event(), database=None)
        assert lookers.turn() == 0.0  # two of three: full
        assert lookers.turn() == BATCH_LINGER  # the third alone
    assert 0 < BATCH_LINGER <= IDLE_WAIT


@pytest.mark.config(ENGINE_BATCH_SIZE=2)
def test_a_turn_moves_the_scans_callbacks_reported_running_first_as_a_batch(app, simulator):
    """A callback records that the engine runs a queued scan; the looker's next turn moves it to
    running with its event, with nothing due to look at: a full batch of moves is followed by the
    next turn at once, a partial one by the pause."""
    with db.connection_context(), freeze_time(NOW):
        _, scans = make_scans(3)
        Scan.update(next_look_at=NOW + timedelta(hours=1)).execute()  # no look due in this test
        for number, scan in enumerate(scans):
            engine_callbacks.progress(f"msg_{number}", until=NOW + timedelta(minutes=5), engine_id=scan.engine_id,
                                      statuses=IN_FLIGHT, running=True, recipes_total=None, recipes_done=None,
                                      queued="queued", now=utcnow(), lock_timeout_ms=1000)
        lookers = Lookers(size=1, stopping=threading.Event(), database=None)
        assert [Scan.get_by_id(s.id).status for s in scans] == ["queued"] * 3
        assert lookers.turn() == 0.0  # two of three moved: full
        assert lookers.turn() == BATCH_LINGER  # the third alone
        assert [Scan.get_by_id(s.id).status for s in scans] == ["running"] * 3
        assert 0 < lookers.turn() <= IDLE_WAIT  # nothing left to move or look at
