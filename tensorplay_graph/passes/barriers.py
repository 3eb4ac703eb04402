"""The ``barriers`` pass: mark every node that may not join a fusion region, and say why.

Every verdict is derived from something inspectable -- the op object's own
flags (``CustomOpDef.mutates_args`` / ``is_triton_op`` / ``is_tile_lang_op``),
the prim record's flags (``side_effect``, ``random``, ``data_dependent``),
the call's spelling (``x.add_(y)``, ``out=``) and the backends' ``supports``
answers -- never from a hidden list of op names.

>>> barriers(gm, backends=["reference"])             # doctest: +SKIP
>>> gm.graph.find_nodes(op="call_function")[0].meta["barrier"]   # doctest: +SKIP
Barrier(code='custom_op', reason='mylib::scale is a registered custom op ...')
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

__all__ = ["Barrier", "barriers", "barrier_of", "custom_op_of", "is_inplace_call", "mutates",
           "CODES"]

CODES = ("custom_op", "triton_op", "tile_lang_op", "mutation", "side_effect",
         "data_dependent", "random", "no_prim", "unsupported")

# Codes whose nodes must keep their place relative to all other nodes: no region
# spans them and no reordering moves a node across them (mutation order, RNG order).
FENCE_CODES = frozenset({"mutation", "side_effect", "random"})

# In-place ``operator`` functions (``x += y`` on a tensor mutates x; ``x[i] = v`` too).
_INPLACE_OPERATORS = frozenset(
    getattr(operator, name) for name in dir(operator)
    if name.startswith("i") and name[1:] in dir(operator) and name not in ("index", "is_", "is_not")
) | {operator.setitem, operator.delitem}


def _is_inplace_operator(target: Any) -> bool:
    try:
        return target in _INPLACE_OPERATORS
    except TypeError:  # unhashable targets (a Kernel dataclass) are never operator functions
        return False


@dataclass(frozen=True)
class Barrier:
    """Why a node may not join a region: ``code`` (one of ``CODES``) and a sentence.

    ``fence`` is True when the node must also keep its order relative to every
    other node (mutations, side effects, random ops).
    """

    code: str
    reason: str
    fence: bool = False

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"barrier code must be one of {CODES}, got {self.code!r}")

    def __str__(self) -> str:
        return f"{self.code}: {self.reason}"


def custom_op_of(target: Any) -> Optional[Any]:
    """``target`` if it is a registered custom op (ours or TensorPlay's ``CustomOpDef``)."""
    # Duck-typed on the CustomOpDef properties both libraries share, so neither
    # library has to be imported to recognise the other's ops.
    if all(hasattr(target, a) for a in ("mutates_args", "is_triton_op", "is_tile_lang_op")):
        return target
    return None


def _op_label(node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    return getattr(target, "name", None) if custom_op_of(target) else (
        getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target))


def is_inplace_call(node) -> Optional[str]:
    """A sentence if the call writes into one of its inputs (``add_``, ``+=``, ``out=``)."""
    if node.op == "call_method" and isinstance(node.target, str):
        name = node.target
        if name.endswith("_") and not name.endswith("__"):
            return f"Tensor.{name} writes into its input in place"
    if node.op == "call_function":
        if _is_inplace_operator(node.target):
            return f"operator.{node.target.__name__} updates its first operand in place"
        fname = getattr(node.target, "__name__", "")
        in_operator = getattr(node.target, "__module__", None) in ("operator", "_operator")
        if fname.endswith("_") and not fname.endswith("__") and not in_operator:
            return f"{fname} writes into its input in place"
    if node.kwargs.get("out") is not None:
        return f"{_op_label(node)}(out=...) writes into its `out` argument"
    if node.kwargs.get("inplace") is True:
        return f"{_op_label(node)}(inplace=True) writes into its input"
    return None


def mutates(node) -> bool:
    """True if ``node`` writes into one of its inputs (in-place call or ``mutates_args``)."""
    op = custom_op_of(node.target) if node.op == "call_function" else None
    return bool(op is not None and op.mutates_args) or is_inplace_call(node) is not None


def _custom_op_barrier(op) -> Barrier:
    name = getattr(op, "name", repr(op))
    mutated = sorted(op.mutates_args)
    mutation = (f"; it mutates {', '.join(mutated)} (declared mutates_args), so it also keeps "
                f"its order with every reader and writer") if mutated else ""
    if op.is_triton_op:
        return Barrier("triton_op", f"{name} is a triton_op: it runs its own registered Triton "
                       f"kernel, never fused{mutation}", fence=bool(mutated))
    if op.is_tile_lang_op:
        return Barrier("tile_lang_op", f"{name} is a tile_lang_op: it runs its own registered "
                       f"TileLang kernel, never fused{mutation}", fence=bool(mutated))
    if mutated:
        return Barrier("mutation", f"custom op {name} mutates {', '.join(mutated)} (declared "
                       f"mutates_args); it keeps its order with every reader and writer",
                       fence=True)
    return Barrier("custom_op", f"{name} is a registered custom op: opaque, it runs its own "
                   f"kernel through eager dispatch")


def barrier_of(node, backends: Sequence = ()) -> Optional[Barrier]:
    """The ``Barrier`` of one node, or ``None`` if it may join a region.

    ``backends`` are resolved backend objects; a node with a prim that none of
    them supports gets an ``unsupported`` barrier naming each one's reason.
    """
    if node.op not in ("call_function", "call_method"):
        return None
    op = custom_op_of(node.target) if node.op == "call_function" else None
    if op is not None:
        return _custom_op_barrier(op)
    inplace = is_inplace_call(node)
    if inplace is not None:
        return Barrier("mutation", f"{inplace}; it keeps its order with every reader and writer",
                       fence=True)
    prim = node.meta.get("prim")
    if prim is None:
        return Barrier("no_prim", f"{_op_label(node)} has no prim, so no backend can generate "
                       f"code for it; it runs eagerly. To fuse it, add a prim record in "
                       f"tensorplay_graph/prims")
    flagged = prim.flags_apply(node.meta.get("prim_args", {}))  # dropout(training=False): no
    if flagged and prim.side_effect:
        return Barrier("side_effect", f"prim {prim.name} has a side effect; it runs eagerly, "
                       f"in program order", fence=True)
    if flagged and prim.random:
        return Barrier("random", f"prim {prim.name} draws random numbers; it runs eagerly so "
                       f"the random stream matches eager execution", fence=True)
    if flagged and prim.data_dependent:
        return Barrier("data_dependent", f"prim {prim.name} has a result whose shape or value "
                       f"depends on tensor data; it runs eagerly")
    return _unsupported(node, prim, backends)


def _unsupported(node, prim, backends: Sequence) -> Optional[Barrier]:
    if not backends:
        return None
    declined: Dict[str, str] = {}
    for backend in backends:
        reason = backend.supports(node)
        if reason is None:
            return None
        declined[backend.name] = str(reason)
    node.meta["declined"] = declined
    reasons = "; ".join(f"{name}: {why}" for name, why in declined.items())
    return Barrier("unsupported", f"no backend supports {prim.name} here ({reasons}); "
                   f"it runs eagerly")


def barriers(gm, backends: Sequence = ()) -> Any:
    """Set ``node.meta["barrier"]`` on every node that may not join a region.

    Run after ``normalize`` (it reads ``meta["prim"]``) and ``shape_prop``
    (backends' ``supports`` read ``meta["tensor_meta"]``). Returns ``gm``.
    """
    from ..backends.registry import resolve_backends

    resolved = resolve_backends(backends)
    for node in gm.graph.nodes:
        node.meta.pop("declined", None)
        barrier = barrier_of(node, resolved)
        if barrier is None:
            node.meta.pop("barrier", None)
        else:
            node.meta["barrier"] = barrier
    return gm
