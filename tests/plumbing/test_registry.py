"""A registry (``app.plumbing.registry``): declared once, each name once, never read before."""
import pytest

from app.plumbing.registry import Registry


def test_a_registry_is_read_only_once_declared_and_declared_once():
    registry: Registry[str] = Registry("colours", lambda name: name)
    with pytest.raises(RuntimeError, match="colours are not declared yet"):
        registry.items()
    registry.declare("red", "green")
    assert registry.items() == ("red", "green")
    with pytest.raises(RuntimeError, match="declared once"):
        registry.declare("blue")
    assert registry.items() == ("red", "green")


def test_a_name_declared_twice_is_refused_and_declares_nothing():
    registry: Registry[tuple[str, int]] = Registry("pairs", lambda pair: pair[0])
    with pytest.raises(RuntimeError, match="declared twice"):
        registry.declare(("a", 1), ("a", 2))
    registry.declare(("a", 1))
    assert registry.items() == (("a", 1),)
