"""The scopes' registry (``app.accounts.scopes``): D21's own and each domain's, declared from their
packages before any module reads them, in the order customers read them."""
import json
import subprocess
import sys

import pytest

from app.accounts import access, scopes
from app.watches import scopes as watch_scopes

D21 = ("scans:write", "scans:read", "scans:erase", "webhooks", "activity:read")


def test_every_domains_scopes_are_declared_d21s_first():
    """D21's in their order, then the other domains' (the watches' among them), each once, with its words."""
    assert access.SCOPES[:len(D21)] == D21 and watch_scopes.WATCHES in access.SCOPES[len(D21):]
    assert [scope.name for scope in scopes.SCOPES] == list(D21)
    assert len(set(access.SCOPES)) == len(access.SCOPES)
    assert {scope.name: scope.words for scope in scopes.every_scope()} == access.SCOPE_WORDS
    assert all(scope.words for scope in scopes.every_scope())


def test_a_process_that_imports_only_the_access_rules_knows_every_scope():
    code = "import json; from app.accounts import access; print(json.dumps(access.SCOPES))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert tuple(json.loads(done.stdout)) == access.SCOPES


def test_the_scopes_are_declared_once_and_no_name_twice():
    declared = scopes.every_scope()
    with pytest.raises(RuntimeError, match="declared twice"):
        scopes.REGISTRY.declare(*declared, scopes.Scope("scans:read", "again"))
    with pytest.raises(RuntimeError, match="declared once"):
        scopes.REGISTRY.declare(scopes.Scope("usage:read", "read the account's usage"))
    assert scopes.every_scope() == declared
