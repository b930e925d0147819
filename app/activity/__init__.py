"""Activity: what each call and portal action did and cost (the activity log), its export, and
the push of audit events to a customer's SIEM.

Offers: ``entries`` (record an entry, list, export), ``audit_sinks``, ``models``, ``audit_models``."""
