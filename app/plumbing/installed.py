"""A part handed in at start: the HTTP toolkits (``app.api``, ``app.portal``) know no domain, and
``app.blueprints`` installs into them what they run (the pipeline's adapter, the accounts, the
activity log) when the app is built; a domain that a higher one acts on at one of its moments is
handed that higher one's function the same way (the scan page's neighbours, the watches' comparison
of a finished scan and a person's watches: ``app.create_app``), so that no import runs back up."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Installed(Generic[T]):
    """One part, installed once the app is built; asked for before that, it raises (a view served
    outside ``create_app`` would otherwise answer unchecked or go unrecorded: never)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._part: T | None = None
        self._load: Callable[[], T] | None = None

    def install(self, part: T) -> None:
        self._part = part

    def install_later(self, load: Callable[[], T]) -> None:
        """Install what ``load()`` makes, made when first asked for: its imports are paid by the
        processes that use it (an operator's command that never asks loads none of them)."""
        self._part, self._load = None, load

    def __call__(self) -> T:
        if self._part is None and self._load is not None:
            self._part = self._load()  # a race makes it twice, alike: no lock needed
        if self._part is None:
            raise RuntimeError(f"{self.what} is not installed: the app is built by app.create_app")
        return self._part
