"""The ``cleanup`` pass: dead code elimination and common subexpression elimination.

DCE never removes a node that has an effect beyond its result: declared
mutations (``mutates_args``), in-place calls (``add_``, ``+=``, ``out=``), side
effects and random draws (removing one would shift the random stream). Both
passes ask :func:`tensorplay_graph.ir.effects.is_impure`, the predicate
``Graph.eliminate_dead_code`` uses too.

CSE merges pure nodes with the same target and the same arguments. Pure means:
a prim without side effect / randomness, a lowered kernel call, or a
``getitem`` on one. Mutations and other fences reset the table, because the
same expression after ``x.add_(1)`` reads a different value. A node whose value
(or an alias of it: a view, a no-op cast) is ever written in place is never
merged: ``a = x + 1; b = x + 1; b.mul_(10)`` keeps two buffers, as eager does.

>>> cleanup(gm)                                           # doctest: +SKIP
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Dict, Optional

from ..ir.aliases import mutated_alias_nodes
from ..ir.effects import is_impure

__all__ = ["cleanup", "dce", "cse", "is_pure"]

log = logging.getLogger(__name__)


def dce(gm) -> int:
    """Erase nodes nobody reads that have no effect; returns how many were erased."""
    graph = gm.graph
    before = len(graph.nodes)
    graph.eliminate_dead_code()
    removed = before - len(graph.nodes)
    if removed:
        log.debug("dce: erased %d nodes", removed)
    return removed


def is_pure(node) -> bool:
    """True when two calls with equal target and arguments always give equal results."""
    if node.op not in ("call_function", "call_method") or is_impure(node):
        return False
    if node.meta.get("kernel") is not None:
        return True
    if node.op == "call_function" and node.target is operator.getitem:
        source = node.args[0] if node.args else None
        return getattr(source, "meta", {}).get("kernel") is not None
    barrier = node.meta.get("barrier")
    if barrier is not None and barrier.code not in ("unsupported",):
        return False
    prim = node.meta.get("prim")
    return prim is not None and not (prim.side_effect or prim.random or prim.data_dependent)


def _key(value: Any) -> Any:
    """A hashable stand-in for an argument structure (nodes by identity)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _key(v)) for k, v in value.items()))
    if isinstance(value, slice):
        return ("slice", _key(value.start), _key(value.stop), _key(value.step))
    if isinstance(value, float) and value != value:  # NaN != NaN; never merge on it
        raise TypeError("nan")
    hash(value)
    return (type(value).__name__, value)


def _node_key(node) -> Optional[tuple]:
    try:
        return (node.op, id(node.target) if not isinstance(node.target, str) else node.target,
                _key(node.args), _key(node.kwargs))
    except TypeError:  # an unhashable constant: leave the node alone
        return None


def _writes(node) -> bool:
    return node.op in ("call_function", "call_method") and is_impure(node)


def cse(gm) -> int:
    """Replace each pure node by an earlier identical one; returns how many were merged."""
    graph = gm.graph
    seen: Dict[tuple, Any] = {}
    merged = 0
    written = mutated_alias_nodes(graph)  # merging these would share a buffer eager keeps apart
    for node in list(graph.nodes):
        if _writes(node):
            seen.clear()  # values read after a write may differ
            continue
        if node in written or not is_pure(node):
            continue
        key = _node_key(node)
        if key is None:
            continue
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        node.replace_all_uses_with(first)
        graph.erase_node(node)
        merged += 1
    if merged:
        log.debug("cse: merged %d nodes", merged)
    return merged


def cleanup(gm) -> Any:
    """CSE, then DCE (CSE leaves the merged-away nodes' inputs possibly dead). Returns ``gm``."""
    cse(gm)
    dce(gm)
    return gm
