"""Personal data kept out of PostgreSQL's own log (D20). psycopg2 writes a statement's
parameters into its text before sending it, so wherever the server logs a statement's text (a
failed statement, a slow one, every one) it logs the targets and bodies in it as well. The
server's settings, per role (``ALTER ROLE … SET``, README "Running it in production"), decide
whether it does; ``statement_logging_risks`` says which of them would, for the operator's
``db check-logging``."""
from __future__ import annotations

from app.privacy.statements import server_log as store

# setting -> (is it safe, what to set): each decides whether some statement's text is logged.
RULES = {
    # Any error logs its statement's text below panic (the default, error, logs every failure).
    "log_min_error_statement": (lambda value: value == "panic", "panic"),
    # ddl logs only the schema's statements (migrations), which hold no personal data.
    "log_statement": (lambda value: value in ("none", "ddl"), "none"),
    "log_min_duration_statement": (lambda value: value == "-1", "-1"),
    "log_min_duration_sample": (lambda value: value == "-1", "-1"),
    "log_transaction_sample_rate": (lambda value: float(value) == 0, "0"),
}


def statement_logging_risks() -> list[str]:
    """One line per server setting under which PostgreSQL would log statements with their
    parameters in them (nothing: none would), with the value that keeps them out."""
    current = store.settings(tuple(RULES))
    return [f"{name} is {current[name]}: statements would reach the server's log with their personal data "
            f"(set it to {fix}, e.g. ALTER ROLE <the service's role> SET {name} = '{fix}')"
            for name, (safe, fix) in RULES.items() if name in current and not safe(current[name])]
