"""The table of VJP rules by prim name, and attaching them to the prim records."""

from __future__ import annotations

from typing import Any, Callable, Dict

from . import _REGISTRY

_RULES: Dict[str, Callable[..., Any]] = {}


def is_node(value: Any) -> bool:
    """A graph node (a rule's tensor argument), not a constant or None."""
    return hasattr(value, "meta") and hasattr(value, "users")


def rule(*names: str) -> Callable:
    """Register the decorated function as the VJP rule of the prims called ``names``."""
    def register(fn: Callable) -> Callable:
        for name in names:
            _RULES[name] = fn
        return fn
    return register


def attach() -> None:
    """Set ``vjp`` on every registered prim that has a rule here."""
    for name, fn in _RULES.items():
        prim = _REGISTRY.get(name)
        if prim is not None and prim.vjp is None:
            prim.vjp = fn
