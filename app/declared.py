"""What each domain declares to the registries below the domains, found where the convention puts
it: a domain's ``event_kinds`` module (``KINDS``: its event kinds, ``app.events.kinds.Kind``) and its
``scopes`` module (``SCOPES``: the scopes its views need, ``app.accounts.scopes.Scope``).

``import app`` runs this first (``app/__init__.py``), so every process, and every module that reads a
registry, which can only be imported through the ``app`` package, sees the whole of it; each registry
refuses to be read before. The domains are taken in the order of their names, so the lists customers
read (the events an endpoint may list, the scopes a key may carry) keep one order: the accounts' scopes
(D21's) first, the scans' own events (``app.events.kinds``) first. A domain's new kind or scope, its
first included, is an entry in its own package and nothing here: a module these names find is never
left out, where a list of them would have to be kept.
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from app.accounts import scopes
from app.events import kinds

_APP = Path(__file__).resolve().parent


def declaring(module_name: str) -> Iterator[ModuleType]:
    """Each domain's module ``module_name`` (``app/<domain>/<module_name>.py``), the domains in name order."""
    for path in sorted(_APP.glob(f"*/{module_name}.py")):
        if (path.parent / "__init__.py").exists():
            yield importlib.import_module(f"app.{path.parent.name}.{module_name}")


kinds.REGISTRY.declare(*(kind for module in declaring("event_kinds") for kind in module.KINDS))
scopes.REGISTRY.declare(*(scope for module in declaring("scopes") for scope in module.SCOPES))
