"""Webhooks: a key's endpoints and settings, the delivery rows written with each event, their
attempts and signatures, and the SSRF guard.

Offers: ``outbox`` (events to delivery rows, a key's settings, signing secrets, redelivery),
``deliveries`` (the attempt state machine), ``delivery_console``, ``endpoints``, ``webhook_urls``,
``special_addresses``, ``models``."""
