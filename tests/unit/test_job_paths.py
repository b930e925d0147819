"""A queued job names its function by a dotted path (RQ), read when a worker takes it, maybe after
an upgrade that moved modules: every path the service enqueues, and every path an earlier version
enqueued that may still wait in Redis, imports."""
import pytest
from rq.utils import import_attribute

from app.plumbing.jobs import DELIVER_JOB, FORGET_JOB

# A scan's tracking job of the RQ job chains that D24's batch looks retired: kept as a hand-over.
EARLIER = ("workers.engine_jobs.track_scan",)


@pytest.mark.parametrize("path", [DELIVER_JOB, FORGET_JOB, *EARLIER])
def test_a_queued_jobs_path_still_imports(path):
    assert callable(import_attribute(path))


def test_the_jobs_live_in_the_workers_package_which_no_move_of_app_renames():
    assert all(path.startswith("workers.") for path in (DELIVER_JOB, FORGET_JOB, *EARLIER))
