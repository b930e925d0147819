"""Marshmallow schemas: request parsing and the documented response shapes."""
