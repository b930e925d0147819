"""The suite's workers each get a Redis database of their own, counted from the one the run was
given: two runs on one Redis given different numbers do not share (and flush) one."""
from tests.parallel import worker_redis


def test_workers_count_their_redis_databases_from_the_one_given():
    assert [worker_redis("redis://127.0.0.1:6379/15", i) for i in range(3)] == [
        "redis://127.0.0.1:6379/15", "redis://127.0.0.1:6379/14", "redis://127.0.0.1:6379/12"]
    other = [worker_redis("redis://127.0.0.1:6379/9", i) for i in range(2)]
    assert other == ["redis://127.0.0.1:6379/9", "redis://127.0.0.1:6379/8"]
    assert worker_redis("redis://127.0.0.1:6379", 1) == "redis://127.0.0.1:6379/14"  # none given: from 15
    assert worker_redis("unix:///tmp/redis.sock?timeout=1&db=12", 1).endswith("?timeout=1&db=10")
