"""A part the HTTP toolkits are handed at start: asked for before, it refuses to serve."""
import pytest

from app.plumbing.installed import Installed


def test_a_part_asked_for_before_it_is_installed_raises_and_after_it_is_the_part():
    accounts = Installed("the portal's accounts")
    with pytest.raises(RuntimeError, match="the portal's accounts is not installed: the app is built by"):
        accounts()
    part = object()
    accounts.install(part)
    assert accounts() is part
