"""What the domains declare (``app.declared``): each domain's ``event_kinds`` and ``scopes`` modules,
found by their place, the domains in name order, every one declared to its registry."""
from pathlib import Path

from app import declared
from app.accounts import scopes
from app.events import kinds

APP = Path(declared.__file__).parent


def test_each_domains_modules_are_found_in_the_order_of_the_domains_names():
    for name in ("event_kinds", "scopes"):
        found = [module.__name__ for module in declared.declaring(name)]
        on_disk = sorted(f"app.{path.parent.name}.{name}" for path in APP.glob(f"*/{name}.py"))
        assert found == on_disk and found, name
    assert next(m.__name__ for m in declared.declaring("scopes")) == "app.accounts.scopes"  # D21's first


def test_every_declared_kind_and_scope_is_in_its_registry_in_that_order():
    assert kinds.declared() == tuple(kind for module in declared.declaring("event_kinds") for kind in module.KINDS)
    assert scopes.every_scope() == tuple(scope for module in declared.declaring("scopes") for scope in module.SCOPES)
    assert {"privacy", "sources", "watches", "webhooks"} <= {m.__name__.split(".")[1]
                                                             for m in declared.declaring("event_kinds")}
