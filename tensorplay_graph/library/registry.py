"""The process-wide operator registry: ``"ns::name"`` -> ``CustomOpDef``.

Registration takes one re-entrant lock; lookups are plain dict reads, atomic
under the GIL, so the call path never locks.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..frameworks import adapter_for, loaded
from .schema import require_str

if TYPE_CHECKING:  # pragma: no cover
    from .custom_op import CustomOpDef

LOCK = threading.RLock()
_OPS: dict[str, "CustomOpDef"] = {}
# Namespaces that already own a DEF ``Library``.
DEF_NAMESPACES: set[str] = set()


def get_op(op_name: str) -> "CustomOpDef":
    """The operator previously defined as ``"ns::name"`` (RuntimeError if unknown)."""
    op = _OPS.get(require_str(op_name, "op name"))
    if op is None:
        raise RuntimeError(
            f"unknown operator {op_name!r}; define it with custom_op / define first"
        )
    return op


def has_op(op_name: str) -> bool:
    """True when ``"ns::name"`` is defined."""
    return op_name in _OPS


def find_op(op_name: str) -> "CustomOpDef | None":
    """The operator named ``op_name`` or ``None``."""
    return _OPS.get(op_name)


def all_ops() -> list["CustomOpDef"]:
    """Every defined operator, in definition order."""
    with LOCK:
        return list(_OPS.values())


def ops_in(namespace: str) -> dict[str, "CustomOpDef"]:
    """``{opname: op}`` of one namespace."""
    with LOCK:
        return {op.opname: op for op in _OPS.values() if op.namespace == namespace}


def add_op(op: "CustomOpDef") -> "CustomOpDef":
    """Register a new operator; RuntimeError naming ``get_op`` on duplicates."""
    with LOCK:
        if op.name in _OPS:
            raise RuntimeError(
                f"operator {op.name!r} is already defined; use get_op({op.name!r}) "
                "to reach it or pick a fresh namespace"
            )
        _OPS[op.name] = op
    keep_opaque_to_dynamo(op)
    return op


def keep_opaque_to_dynamo(*ops: "CustomOpDef") -> None:
    """Mark ops (default: every op) ``allow_in_graph`` for torch's Dynamo.

    Dynamo would otherwise inline ``CustomOpDef.__call__`` and trace the op's body
    into its graph, dissolving the barrier. Ops are marked when defined if Dynamo
    is loaded, and all at once when the ``torch.compile`` backend is first loaded.
    """
    adapters = [adapter_for(name) for name in loaded()]
    for op in (ops or all_ops()) if adapters else ():
        if not getattr(op, "_opaque_to_dynamo", False):
            op._opaque_to_dynamo = any([adapter.keep_opaque(op) for adapter in adapters])


def resolve_op(op: Any) -> "CustomOpDef":
    """A ``CustomOpDef`` from itself or its qualified name."""
    from .custom_op import CustomOpDef

    if isinstance(op, CustomOpDef):
        return op
    if isinstance(op, str):
        return get_op(op)
    raise TypeError(f"expected an operator name or CustomOpDef, got {type(op)!r}")
