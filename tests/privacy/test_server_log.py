"""The settings under which PostgreSQL would log a statement's text, parameters and all."""
from app.plumbing.db import execute, transaction
from app.privacy import server_log

QUIET = {"log_min_error_statement": "panic", "log_statement": "none", "log_min_duration_statement": "-1",
         "log_min_duration_sample": "-1", "log_transaction_sample_rate": "0"}


def set_local(settings: dict[str, str]) -> None:
    for name, value in settings.items():
        execute(f"SET LOCAL {name} = '{value}'")


def test_a_server_that_logs_failed_or_slow_statements_is_named_setting_by_setting(conn):
    with transaction():
        set_local({**QUIET, "log_min_error_statement": "error", "log_min_duration_statement": "250"})
        risks = server_log.statement_logging_risks()
    assert [line.split(" ")[0] for line in risks] == ["log_min_error_statement", "log_min_duration_statement"]
    assert "set it to panic" in risks[0] and "250" in risks[1]


def test_a_server_that_logs_no_statement_text_has_no_risk(conn):
    with transaction():
        set_local(QUIET)
        assert server_log.statement_logging_risks() == []
        set_local({"log_statement": "ddl"})  # migrations only: no personal data in them
        assert server_log.statement_logging_risks() == []
        set_local({"log_statement": "mod"})
        assert [line.split(" ")[0] for line in server_log.statement_logging_risks()] == ["log_statement"]
