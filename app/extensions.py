"""Extension objects shared across the app, bound in ``create_app``.

Keeping them here (not in ``app/__init__``) lets models, services and workers import
them without importing the app factory, as the Flask tutorial's ``init_app`` pattern
recommends. The flask-smorest ``Api`` is made per app in ``create_app`` because it
holds one app's OpenAPI document.
"""
from flask_wtf import CSRFProtect

from app.plumbing.db import db  # noqa: F401  (the app, workers and tests import it from here too)

csrf = CSRFProtect()
