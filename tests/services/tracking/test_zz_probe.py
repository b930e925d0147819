import time
from freezegun.api import real_perf_counter as real
from collections import Counter, defaultdict

from freezegun import freeze_time
from app.extensions import db
from app.models import Scan
from app.services.tracking import looks
from tests.services.conftest import new_customer, new_scan
from tests.services.tracking.test_looks import NOW


def test_probe(monkeypatch, conn, simulator):
    with freeze_time(NOW) as frozen:
        owners = [new_customer(credits=1000, inflight=1000, hour=10_000, day=10_000) for _ in range(100)]
        for i in range(100):
            new_scan(*owners[i % 100], target=f"p{i}@example.com")
        frozen.tick(600)
        calls = defaultdict(float); counts = Counter()
        database = db.obj
        orig = database.execute_sql
        def spy(sql, *a, **k):
            t = real()
            try:
                return orig(sql, *a, **k)
            finally:
                key = " ".join(sql.split()[:5])[:70]
                calls[key] += real() - t; counts[key] += 1
        monkeypatch.setattr(database, "execute_sql", spy)
        import cProfile, pstats
        prof = cProfile.Profile(time.process_time); prof.enable()
        t = time.process_time(); w = real()
        report = looks.look_due()
        prof.disable(); pstats.Stats(prof).sort_stats("tottime").print_stats(25); pstats.Stats(prof).sort_stats("cumulative").print_stats(70)
        print("\n", {k: v for k, v in report.items() if k != "lags"}, f"cpu {1000*(time.process_time()-t):.1f} ms wall {1000*(real()-w):.1f}")
        for k, v in sorted(calls.items(), key=lambda kv: -kv[1]):
            print(f"{counts[k]:4d} {1000*v:8.1f} ms  {k}")
