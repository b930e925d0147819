"""The domain's SQL statements (nothing else in it writes SQL)."""
