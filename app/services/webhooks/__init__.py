"""Webhooks: a key's webhook settings, endpoints, deliveries and their console, URL checks."""
