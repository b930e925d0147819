"""The customer portal's toolkit: its blueprint (``blueprint``), sessions and the permission each
page declares (``security``), CSRF-protected forms (``forms``), the activity log's entry of every
action (``audit``), charts (``charts``).

Server-rendered (Jinja2, no build step), behind an e-mail + password login set by an
operator (D12). Every page shows only the logged-in customer's objects: another
customer's key id answers 404 exactly like an unknown one, so ids cannot be probed.
Forms carry CSRF tokens (flask-wtf); responses carry CSP, frame and referrer headers.

The pages are each domain's (``app/<domain>/pages``): they import this toolkit, which imports no
domain; ``app.blueprints`` puts them on the blueprint and hands the toolkit the accounts and the
activity log at start.
"""
