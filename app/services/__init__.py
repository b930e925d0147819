"""Business rules, free of Flask: shared by the API views, the CLI and the workers.

Services own their transactions; callers pass plain values and get plain values
(or raise ``app.errors.ApiError``).
"""
