"""A list the domains declare once and every reader reads after: the events' kinds and the keys'
scopes, each held by the domain that reads it, filled by ``app.declared`` (which ``import app``
runs first) from what each domain declares in its own package."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, what: str, name: Callable[[T], str]):
        self.what, self.name = what, name
        self._items: tuple[T, ...] | None = None

    def declare(self, *items: T) -> None:
        """Every domain's items, in the order customers read them: once, by ``app.declared``."""
        names = [self.name(item) for item in items]
        if len(set(names)) != len(names):
            raise RuntimeError(f"one of the {self.what} is declared twice: {', '.join(names)}")
        if self._items is not None:
            raise RuntimeError(f"the {self.what} are declared once, by app.declared")
        self._items = items

    def items(self) -> tuple[T, ...]:
        """What was declared; only a module run on its own, outside the ``app`` package, reads it before."""
        if self._items is None:
            raise RuntimeError(f"the {self.what} are not declared yet: import app first (app.declared)")
        return self._items
