"""The floor app plus only the service's per-request observability: its JSON log line and its
HTTP metrics (``app.metrics_http``), as every API call has them. Measured beside the floor's
read (``floor_read_observed``), it says what that observability alone costs a read that does
nothing else, under the same gunicorn settings.

    gunicorn --config gunicorn.conf.py bench.floor_observed:app   (as bench.floor_app, LOG_FORMAT=json)
"""
from __future__ import annotations

import os

from app import metrics_http
from app.plumbing.logging_setup import setup_logging
from bench.floor_app import app

setup_logging(os.environ.get("LOG_LEVEL", "INFO"), os.environ.get("LOG_FORMAT", "json"))
metrics_http.init_app(app)
