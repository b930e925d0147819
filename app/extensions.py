"""Extension objects shared across the app, bound in ``create_app``.

Keeping them here (not in ``app/__init__``) lets models, services and workers import
them without importing the app factory, as the Flask tutorial's ``init_app`` pattern
recommends. The flask-smorest ``Api`` is made per app in ``create_app`` because it
holds one app's OpenAPI document.
"""
from flask_wtf import CSRFProtect
from peewee import DatabaseProxy

# Bound to SQLite or PostgreSQL at start-up by ``app.db.init_db``.
db = DatabaseProxy()
csrf = CSRFProtect()
