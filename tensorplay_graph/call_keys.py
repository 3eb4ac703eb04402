"""Call keys (``capture.structure.call_key``) described and compared: why a call recompiles,
and the shape-free family of a key (automatic dynamic sizes)."""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from .capture.structure import TENSOR_FIELDS
from .frameworks import dtype_name

_TENSOR_FIELDS = ("framework",) + TENSOR_FIELDS


def _readable(field: str, value: Any) -> Any:
    if field == "dtype":
        return dtype_name(value)
    if field in ("shape", "stride"):
        return tuple(value)
    return str(value) if field == "device" else value


def describe_change(old: Tuple, new: Tuple, names: Sequence[str]) -> str:
    """Human-readable difference between two specialization keys."""
    if len(old) != len(new):
        return f"number of arguments changed from {len(old)} to {len(new)}"
    changes: List[str] = []
    for i, (a, b) in enumerate(zip(old, new)):
        label = f"argument {i} ({names[i]})" if i < len(names) else f"argument {i}"
        _diff(a, b, label, changes)
    return "; ".join(changes) or "guard mismatch"


def _diff(a: Any, b: Any, label: str, changes: List[str]) -> None:
    """Append where keys ``a`` and ``b`` differ (see ``structure.value_key`` for their forms)."""
    if a == b:
        return
    if _is_tensor_key(a) and _is_tensor_key(b):
        fields = [f"{field} {_readable(field, x)} -> {_readable(field, y)}"
                  for field, x, y in zip(_TENSOR_FIELDS, a[1:], b[1:]) if x != y]
        changes.append(f"{label}: " + ", ".join(fields))
        return
    same_container = (len(a) == len(b) == 2 and a[0] == b[0] and isinstance(a[1], tuple)
                      and isinstance(b[1], tuple) and len(a[1]) == len(b[1]))
    if not same_container:
        changes.append(f"{label}: {_short(a)} -> {_short(b)}")
        return
    named = a[0] in ("dict", "kwargs") or not isinstance(a[0], str) and not issubclass(a[0], tuple)
    for i, (x, y) in enumerate(zip(a[1], b[1])):
        if named:
            where = x[0] if a[0] == "kwargs" else f"{label}[{x[0]!r}]"
            _diff(x[1], y[1], where if x[0] == y[0] else label, changes)
        else:
            _diff(x, y, f"{label}[{i}]", changes)


def _is_tensor_key(key: Any) -> bool:
    return isinstance(key, tuple) and len(key) == 7 and key[0] == "tensor"


def _short(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
        return f"{key[0]} {key[1]!r}"
    return repr(key)


def shape_free(key: Any) -> Any:
    """``key`` with every tensor's shape and stride reduced to its rank (dynamic families)."""
    if _is_tensor_key(key):
        return key[:2] + (len(key[2]),) + key[3:5] + (None, key[6])
    if isinstance(key, tuple):
        return tuple(shape_free(item) for item in key)
    return key
