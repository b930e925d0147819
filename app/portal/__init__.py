"""The customer portal: login, API keys, a key's webhook settings and delivery log, usage.

Server-rendered (Jinja2, no build step), behind an e-mail + password login set by an
operator (D12). Every page shows only the logged-in customer's objects: another
customer's key id answers 404 exactly like an unknown one, so ids cannot be probed.
Forms carry CSRF tokens (flask-wtf); responses carry CSP, frame and referrer headers.
"""
from app.portal import page_modules as pages  # noqa: F401 - registers the pages' routes on bp
from app.portal.blueprint import bp

__all__ = ["bp"]
