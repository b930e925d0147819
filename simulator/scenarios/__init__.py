"""QA scenarios: the simulator drives the whole service end to end, as real processes.

- ``model``: the scenario file format (YAML), its validation, ``{{variables}}`` and matchers.
- ``runner``: runs scenarios against a running service (``python -m simulator scenario NAME|all``)
  and prints a table of expectations met and missed.
- ``operator``: the operator hook (accounts and keys through ``flask --app wsgi ...``, the
  delivery attempt log through ``python -m simulator.scenarios.operator_query``).
- ``stack``: starts API (gunicorn), worker and simulator as separate processes on free ports,
  runs the scenarios and tears everything down (``make scenarios``); ``running_stack()`` for tests.

The format and how to add a scenario: ``docs/scenarios.md``.
"""
from pathlib import Path

SCENARIO_DIR = Path(__file__).resolve().parent
