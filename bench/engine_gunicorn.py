"""gunicorn settings of the bench's engine stand-in (``bench.engine_app``).

Its own file, so gunicorn does not load the service's ``gunicorn.conf.py`` (which checks
the service's settings). Threads keep the API's connections alive between calls, as a
real engine behind a load balancer would; processes give it more than one core's worth.
"""
import os

bind = os.environ["BIND"]
workers = int(os.environ.get("BENCH_ENGINE_WORKERS", 3))
worker_class = "gthread"
threads = int(os.environ.get("BENCH_ENGINE_THREADS", 8))
keepalive = 30
accesslog = None
control_socket_disable = True
