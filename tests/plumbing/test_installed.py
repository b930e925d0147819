"""A part handed in at start: asked for before, it refuses to serve; installed later, it is made when first asked."""
import pytest

from app.plumbing.installed import Installed


def test_a_part_asked_for_before_it_is_installed_raises_and_after_it_is_the_part():
    accounts = Installed("the portal's accounts")
    with pytest.raises(RuntimeError, match="the portal's accounts is not installed: the app is built by"):
        accounts()
    part = object()
    accounts.install(part)
    assert accounts() is part


def test_a_part_installed_later_is_made_when_first_asked_for_and_once():
    made = []

    def load():
        made.append(object())
        return made[-1]

    watches = Installed("the watches")
    watches.install_later(load)
    assert made == []  # nothing loaded at install: an operator's command that never asks pays nothing
    assert watches() is made[0] and watches() is made[0] and len(made) == 1
