"""Which values may share memory, and which of those are written in place.

Eager frameworks hand back *aliases* in many places: views (``x.t()``,
``x[0]``, ``x.view(-1)``), no-op casts (``x.float()`` on a float32 tensor is
``x`` itself), ``x.contiguous()`` on a contiguous tensor, in-place calls
(``x.add_(1)`` returns ``x``), ``dropout(training=False)``. A write through
one name is seen through every other. Passes that merge, drop or recompute
values (CSE, DCE, regions whose kernels write fresh buffers) must know which
nodes are in such a group, so the answer lives here, once.

The analysis is conservative: a node whose result *may* alias an input is
treated as aliasing it. Fresh results: pointwise, reduction, norm and matmul
prims (a cast only when its dtype differs from the input's), registered custom
ops (their outputs never alias inputs, as in ``torch.library``) and lowered
kernel calls.

>>> from tensorplay_graph.ir import Graph
>>> g = Graph(); x = g.placeholder("x")
>>> v = g.call_method("view", (x, -1)); w = g.call_method("add_", (v, 1))
>>> _ = g.output(x)
>>> sorted(n.name for n in mutated_alias_nodes(g))
['add_', 'view', 'x']
"""

from __future__ import annotations

import operator
from typing import Dict, Iterable, List, Set, Tuple

from .effects import mutated_nodes
from .node import Node

__all__ = ["may_alias_inputs", "alias_groups", "mutated_alias_nodes", "is_aliasing_node"]

#: Prim kinds whose result is a fresh tensor (never an alias of an input).
_FRESH_KINDS = frozenset({"pointwise", "reduction", "norm", "matmul", "gather"})


def _is_custom_op(target) -> bool:
    return all(hasattr(target, a) for a in ("mutates_args", "is_triton_op", "is_tile_lang_op"))


def _noop_cast(node: Node) -> bool:
    """A ``cast`` prim whose dtype equals its input's, or whose input dtype is unknown."""
    args = node.meta.get("prim_args", {})
    source = args.get("a")
    meta = getattr(source, "meta", {}).get("tensor_meta") if isinstance(source, Node) else None
    return getattr(meta, "dtype", None) in (None, args.get("dtype"))


def may_alias_inputs(node: Node) -> Tuple[Node, ...]:
    """The input nodes ``node``'s result may share memory with (``()`` when it is fresh)."""
    if node.op not in ("call_function", "call_method"):
        return ()
    if mutated_nodes(node):
        return mutated_nodes(node)[:1]  # ``x.add_(1)`` returns ``x``
    if node.meta.get("kernel") is not None:
        return ()
    if node.op == "call_function":
        if _is_custom_op(node.target):
            return ()
        if node.target is operator.getitem and node.args and isinstance(node.args[0], Node) \
                and node.args[0].meta.get("kernel") is not None:
            return ()  # an output of a lowered kernel: fresh
    prim = node.meta.get("prim")
    if prim is not None and (prim.kind in _FRESH_KINDS or "fresh" in prim.traits):
        if prim.name != "cast" or not _noop_cast(node):
            return ()
    return tuple(node.all_input_nodes)


def is_aliasing_node(node: Node) -> bool:
    """True when ``node``'s result may alias one of its inputs (a view, a no-op cast ...)."""
    return bool(may_alias_inputs(node))


def _find(parent: Dict[Node, Node], node: Node) -> Node:
    root = node
    while parent.get(root, root) is not root:
        root = parent[root]
    while parent.get(node, node) is not root:  # path compression
        parent[node], node = root, parent[node]
    return root


def alias_groups(nodes: Iterable[Node]) -> Dict[Node, Node]:
    """``node -> representative`` over ``nodes``: nodes that may share memory share one."""
    parent: Dict[Node, Node] = {}
    for node in nodes:
        parent.setdefault(node, node)
        for source in may_alias_inputs(node):
            a, b = _find(parent, node), _find(parent, source)
            if a is not b:
                parent[a] = b
    return {node: _find(parent, node) for node in list(parent)}


def mutated_alias_nodes(graph) -> Set[Node]:
    """Every node whose value may be written in place through itself or an alias."""
    nodes: List[Node] = list(graph.nodes)
    groups = alias_groups(nodes)
    written = {groups[target] for node in nodes for target in mutated_nodes(node)
               if target in groups}
    return {node for node, root in groups.items() if root in written}
