"""The API's HTTP toolkit, which knows no domain: the blueprint class (``base``), the error body
(``envelope``), the OpenAPI document's shared parts (``openapi``), the wrappers a view declares
itself with (``hooks``), a creation's answer (``answers``) and the health checks (``health``).

A domain's routes import it; it imports none of them, nor the pipeline: what runs an accounted
call (``app/api_calls.py``, the pipeline's HTTP adapter) is handed to ``hooks`` at start, and the
blueprints are registered from their one list, ``app/blueprints.py``.
"""
