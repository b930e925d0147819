"""gunicorn settings for production; every value can be overridden on the command line.

Threads matter more than processes here: a request spends most of its time waiting on
the database or the engine, so 2 processes x 8 threads per core serve well.

Loading this file checks the service's settings (and, in production, that the database
answers) in the master, before any worker is forked: a bad setting stops gunicorn once,
with one line on stderr and status 1, instead of a master respawning workers that each
fail the same way.
"""
import multiprocessing
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from app.gunicorn_hooks import QuerylessLogger, install_json_errors
from app.plumbing.startup import check_or_exit

_settings = check_or_exit()

# Loopback unless told otherwise: the API is meant to sit behind nginx (ops/nginx.conf),
# which buffers slow clients that would otherwise hold gunicorn's threads.
bind = (os.environ.get("GUNICORN_BIND") or os.environ.get("BIND")
        or f"127.0.0.1:{os.environ.get('PORT') or 8000}")
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", 8))
timeout = 30
graceful_timeout = 30
keepalive = 5
# What gunicorn refuses itself is answered in the API's JSON envelope: gunicorn has no setting
# for it, so its error writer is replaced (app/gunicorn_hooks.py). Behind ops/nginx.conf, nginx's
# stricter limits answer first (a URI over 4000 bytes, so a request line here fits in 4094; a
# header line over 8 KB): what reaches these is more than 100 headers, which nginx cannot count.
limit_request_line = 4094
limit_request_field_size = 8190
limit_request_fields = 100
install_json_errors()

# Which proxies are trusted is the app's setting alone (TRUSTED_PROXIES, applied by ProxyFix in
# app/__init__.py): gunicorn must not apply X-Forwarded-Proto on its own. By default it trusts it
# from 127.0.0.1 whatever TRUSTED_PROXIES says, so a request that only looked secure passed.
forwarded_allow_ips = ""

# The service logs one line per request itself (route, status, duration, request and
# customer ids): gunicorn's own access log would only repeat it, in another format.
accesslog = None
# Should an operator turn it on (--access-logfile), it logs the path without the query string
# (which can hold a target), and the service's request id; no line of gunicorn's carries a
# query string (QuerylessLogger strips them from the request line, Referer and messages).
access_log_format = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(B)s %(M)sms %({x-request-id}o)s'
logger_class = QuerylessLogger

# gunicorn 27's control socket defaults to one path per user ($HOME/.gunicorn/gunicorn.ctl),
# which two instances on one host would fight over: off unless given a path per instance.
if os.environ.get("GUNICORN_CONTROL_SOCKET"):
    control_socket = os.environ["GUNICORN_CONTROL_SOCKET"]
else:
    control_socket_disable = True

if _settings["LOG_FORMAT"] == "json":
    # gunicorn's own messages (master and workers) as JSON lines like the service's.
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": "app.plumbing.logging_setup.ContextFilter"},
                    "redact": {"()": "app.plumbing.logging_setup.RedactFilter"}},
        "formatters": {"json": {"()": "app.plumbing.logging_setup.JsonFormatter"}},
        "handlers": {"json_stderr": {"class": "logging.StreamHandler", "formatter": "json",
                                     "filters": ["context", "redact"], "stream": "ext://sys.stderr"}},
        "root": {"level": _settings["LOG_LEVEL"], "handlers": []},  # the app adds its own in each worker
        "loggers": {
            "gunicorn.error": {"level": _settings["LOG_LEVEL"], "handlers": ["json_stderr"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": False},
        },
    }
    loglevel = _settings["LOG_LEVEL"].lower()

# Metrics: prometheus-client's multiprocess mode adds up the counters of every worker
# (and of the RQ workers of this host when they share the directory, as the README
# says to). Without a directory given, each gunicorn gets a private one.
_own_metrics_dir = None
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _own_metrics_dir = tempfile.mkdtemp(prefix="scan-api-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _own_metrics_dir
os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)


def child_exit(server, worker):
    from prometheus_client import multiprocess
    multiprocess.mark_process_dead(worker.pid)


def on_exit(server):
    if _own_metrics_dir:
        shutil.rmtree(_own_metrics_dir, ignore_errors=True)
