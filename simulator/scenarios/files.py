"""A scenario file loaded: validated against the JSON Schema (``schema``: file, line, "did you
mean"), which is built on the model's constants, then parsed by the model. Apart from both, so
that neither imports the other both ways."""
from __future__ import annotations

from pathlib import Path

from simulator.scenarios.model import Scenario, parse_scenario
from simulator.scenarios.schema import validate_file


def load_scenario(path: str | Path) -> Scenario:
    """Read, validate, parse."""
    path = Path(path)
    return parse_scenario(validate_file(path), path)
