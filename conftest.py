"""The project's root conftest: loads the QA scenario plugin, so ``pytest simulator/scenarios``
collects every scenario file as a test (see simulator/scenarios/plugin.py)."""
pytest_plugins = ["simulator.scenarios.plugin", "tests.parallel"]
