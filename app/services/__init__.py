"""Business rules, free of Flask: shared by the API views, the CLI and the workers, one folder
per domain (docs/architecture.md, "Where to find").

Services own their transactions; callers pass plain values and get plain values
(or raise the domain errors of ``app.services.shared.errors``, which carry no HTTP).
"""
