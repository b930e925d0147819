"""Business rules, free of Flask: shared by the API views, the CLI and the workers.

Services own their transactions; callers pass plain values and get plain values
(or raise the domain errors of ``app.services.shared.errors``, which carry no HTTP).
"""
