"""What privacy is handed at start by the app (``app.create_app``), from a domain above it: the
watches of a person's target (D28), to list in a data-subject export and to end on an opt-out. The
watches stand above privacy, as they create their scans through intake, which checks the opt-outs."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.plumbing.installed import Installed


@dataclass(frozen=True)
class TargetWatches:
    open_with_optout_hash: Callable[[set[str]], list]  # the open watches of these opt-out hashes, locked
    end_watches_of_optout: Callable[[set[str]], int]  # end them (their events sent); how many


WATCHES: Installed[TargetWatches] = Installed("the watches of a target")
