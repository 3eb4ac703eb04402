"""Example values during capture: the proxies' examples, and the metadata read from them."""

from __future__ import annotations

from typing import Any

from ..frameworks import is_tensor, tensor_meta
from .proxy import MISSING, Proxy

__all__ = ["PLAIN", "examples", "set_tensor_meta"]

#: Leaf types that hold no proxy and no tensor (checked by exact type on hot paths).
PLAIN = frozenset({int, float, bool, str, complex, type(None)})


def examples(value: Any) -> Any:
    """``value`` with proxies replaced by their example values (MISSING if any is unknown)."""
    cls = type(value)
    if cls is Proxy:
        return value.example
    if cls is tuple or cls is dict:  # the hot path: one level of proxies and scalars
        items = value.values() if cls is dict else value
        out = []
        for item in items:
            kind = type(item)
            found = item.example if kind is Proxy else item if kind in PLAIN else examples(item)
            if found is MISSING:
                return MISSING
            out.append(found)
        return tuple(out) if cls is tuple else dict(zip(value, out))
    if isinstance(value, Proxy):
        return value.example
    if isinstance(value, (tuple, list)):
        items = [examples(item) for item in value]
        if any(item is MISSING for item in items):
            return MISSING
        if isinstance(value, list):
            return items
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        items = {key: examples(item) for key, item in value.items()}
        return MISSING if any(item is MISSING for item in items.values()) else items
    if isinstance(value, slice):
        parts = [examples(value.start), examples(value.stop), examples(value.step)]
        return MISSING if any(part is MISSING for part in parts) else slice(*parts)
    return value


def set_tensor_meta(node: Any, example: Any) -> None:
    """``node.meta["tensor_meta"]`` of a tensor example (a tuple of them for a sequence)."""
    if example is MISSING:
        return
    if is_tensor(example):
        node.meta["tensor_meta"] = tensor_meta(example)
    elif isinstance(example, (tuple, list)) and any(is_tensor(item) for item in example):
        node.meta["tensor_meta"] = tuple(tensor_meta(item) if is_tensor(item) else None
                                         for item in example)
