"""Privacy: personal data: retention and erasure, opt-outs, data-subject requests, and whether
the database would log statement text.

Offers: ``erasure``, ``suppressions``, ``subjects``, ``server_log``, ``models``."""
