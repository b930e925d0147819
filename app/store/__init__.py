"""The storage layer: the one place that holds SQL.

Every statement the service runs lives in a module here, one per aggregate (customers and
their ledger, keys, scans, idempotency records, deliveries, portal users), in the folder of
its domain, as the services are (``app/store/accounts/keys.py`` beside ``app/services/accounts/``).
Services own the rules and the transactions and call these functions with the rule's values as parameters
(the price, which modes are billed, which statuses count), so that a rule is written once,
in Python, and never restated in SQL. A store module imports models and ``app.db``, never a
service; ``tests/unit/test_store_layer.py`` holds services to it.
"""
