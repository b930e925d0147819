"""gunicorn settings of the held-connection server: the same application as gunicorn.conf.py,
serving the calls that stay open (``?wait=N`` on scan and batch reads and on creation, and
``GET /api/v1/events/stream``) on gevent greenlets instead of threads.

A held call spends its life asleep on a flag the process's one LISTEN session sets
(``app.events.waits``): under the threaded server each one holds one of gunicorn's 16
threads per core, so a few dozen of them starve every ordinary read. Here each costs a
greenlet and a socket, thousands per process. ops/nginx.conf sends those calls (and only
those) here; everything else stays on the threaded server, where CPU-bound work does not
share one thread with thousands of connections.

Everything else (the settings check, the JSON refusals, the query-less logs, the metrics
directory) is gunicorn.conf.py's, loaded after gevent made the standard library cooperative:
first, before anything imports peewee or the service, whose per-thread state (peewee's
connection of "this thread", a lock) must be per greenlet, not one for the whole process.
psycogreen then makes psycopg2 yield while it waits on PostgreSQL (a query waits as a
greenlet, not as the whole process); redis-py needs nothing: its sockets are the standard
library's. The LISTEN session still connects to DATABASE_DIRECT_URL (a
pooler in transaction mode cannot keep one), every query to DATABASE_URL.

Run it next to the threaded server (Procfile's ``held``):
    gunicorn --config gunicorn.held.conf.py wsgi:app
Settings: HELD_BIND (default 127.0.0.1:${HELD_PORT:-8001}), HELD_WORKERS (processes, default
the number of cores), HELD_CONNECTIONS (open connections per process, default 2000).
"""
from gevent import monkey

monkey.patch_all()

import multiprocessing  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402

from psycogreen.gevent import patch_psycopg  # noqa: E402

patch_psycopg()  # process-wide, inherited by the forked workers; before any connection

_base = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gunicorn.conf.py"))
globals().update({name: value for name, value in _base.items() if not name.startswith("__")})

bind = os.environ.get("HELD_BIND") or f"127.0.0.1:{os.environ.get('HELD_PORT') or 8001}"
worker_class = "gevent"
workers = int(os.environ.get("HELD_WORKERS", multiprocessing.cpu_count()))
worker_connections = int(os.environ.get("HELD_CONNECTIONS") or 2000)
# A stream ends only with its client or its key (revoked, expired, narrowed): on a stop or reload
# its clients are cut after this long and reconnect with Last-Event-ID (nothing is lost); a wait
# ends within 60 s anyway.
graceful_timeout = 10
