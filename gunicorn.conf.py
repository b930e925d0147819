"""gunicorn settings for production; every value can be overridden on the command line.

Threads matter more than processes here: a request spends most of its time waiting on
the database or the engine, so 2 processes x 8 threads per core serve well.
"""
import multiprocessing
import os

bind = os.environ.get("BIND", "0.0.0.0:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", 8))
timeout = 30
graceful_timeout = 30
keepalive = 5
accesslog = "-"
limit_request_field_size = 8190
limit_request_fields = 100
