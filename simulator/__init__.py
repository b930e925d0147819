"""Simulator of the investigation engine and of a customer's webhook receiver.

One Flask app (``simulator.app.create_sim_app``) serves both sides the service talks to
in development, tests and QA: the engine of E1/E3 under ``/v1`` and
``/_sim/engine``, and webhook receivers (E4) under ``/_sim/receivers`` and ``/_sim/hooks``;
and, for portal single sign-on in development and QA, a stand-in OpenID provider under
``/_sim/oidc`` (``simulator.oidc``).
Run it with ``python -m simulator``.
"""
