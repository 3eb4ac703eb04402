"""Backward graphs specialized for outputs the loss did not use.

Eager autograd never runs the backward of an output nobody differentiated (a causal LM's
``logits`` and ``past_key_values`` when ``loss`` is what ``backward()`` starts from). A compiled
backward fed a zero tensor for such an output differs twice: it reads and keeps that tensor
(GPT-2's logits at 8x512: 412 MB), and its VJPs multiply the zeros by the forward's values --
``0 * inf`` is NaN where eager has no term at all.

So the backward is specialized per set of dead tangents: a dead tangent is a structural zero
-- "no contribution", not the number 0. Every node whose gradient operands are all structural
zeros is one too: computed from the dead tangent alone, it belongs to that output's backward,
which eager never runs (``g * w``, ``g @ w.T``, views and sums of ``g``, even ``g != g``). An
accumulating ``add`` / ``sub`` of a zero and a live gradient of the same shape is the live
gradient; a gradient of an input made of zeros alone is returned as ``None`` (the caller's
``.grad`` stays ``None``, as in eager, for inputs reached only through unused outputs). A dead tangent mixed with a live gradient
any other way (``cat`` of gradient pieces, an opaque op's backward taking several) stays an
input, and the caller passes zeros -- what eager's engine materializes for those too.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from ..ir.meta import TensorMeta


def _same_value(a: Any, b: Any) -> bool:
    ma, mb = a.meta.get("tensor_meta"), b.meta.get("tensor_meta")
    return isinstance(ma, TensorMeta) and isinstance(mb, TensorMeta) and \
        tuple(ma.shape) == tuple(mb.shape) and ma.dtype == mb.dtype


def _live_operand(node: Any, zero: Set[Any]) -> Optional[Any]:
    """``x`` when ``node`` is ``x + zero``, ``zero + x`` or ``x - zero`` with ``x``'s shape and
    dtype; else None."""
    prim = node.meta.get("prim")
    if prim is None or prim.name not in ("add", "sub"):
        return None
    # the node's own operands: ``prim_args`` of a copied graph may name the original's nodes
    if len(node.args) != 2 or set(node.kwargs) - {"alpha"}:
        return None
    (a, b), alpha = node.args, node.kwargs.get("alpha", 1)
    if b in zero and a not in zero:
        other = a
    elif a in zero and b not in zero and prim.name == "add" and alpha == 1:
        other = b
    else:
        return None
    return other if hasattr(other, "meta") and _same_value(other, node) else None


def _derived(graph: Any, tangents: Sequence[Any]) -> Set[Any]:
    """The nodes computed from any tangent (the gradient values)."""
    found = set(tangents)
    for node in graph.nodes:
        if any(i in found for i in node.all_input_nodes):
            found.add(node)
    return found


def _plan(graph: Any, tangent: Any, derived: Set[Any]) -> Optional[Tuple[Set[Any], Dict[Any, Any]]]:
    """The structural zeros that follow from ``tangent`` and the adds that become their live
    operand; None when the zero meets a live gradient in any other op."""
    zero, bypass = {tangent}, {}
    for node in graph.nodes:
        if node.op == "output" or not any(i in zero for i in node.all_input_nodes):
            continue
        other = _live_operand(node, zero)
        if other is not None:
            bypass[node] = other
            continue
        if all(i in zero for i in node.all_input_nodes if i in derived):
            zero.add(node)
            continue
        return None
    return zero, bypass


def _apply(graph: Any, zero: Set[Any], bypass: Dict[Any, Any]) -> None:
    def resolve(node: Any) -> Any:
        while node in bypass:
            node = bypass[node]
        return node
    for node, other in bypass.items():
        node.replace_all_uses_with(resolve(other))
    out = graph.output_node()
    out.args = tuple(_without(a, zero) for a in out.args)
    for node in reversed(list(graph.nodes)):
        if node in zero or node in bypass:
            graph.erase_node(node)


def _without(value: Any, zero: Set[Any]) -> Any:
    if isinstance(value, (tuple, list)):
        return type(value)(_without(v, zero) for v in value)
    return None if value in zero else value


def drop_dead_tangents(gm: Any, n_saved: int, dead: Sequence[int]) -> Tuple[Any, List[int]]:
    """A copy of the backward ``gm`` (inputs ``*saved, *tangents``, outputs the inputs'
    gradients) without the tangents at positions ``dead`` that are structural zeros; and the
    positions of the tangents the copy still takes, in order."""
    from ..compiler import copy_graph_module
    copy = copy_graph_module(gm)
    graph = copy.graph
    tangents = [n for n in graph.nodes if n.op == "placeholder"][n_saved:]
    derived = _derived(graph, tangents)
    kept = []
    for position, tangent in enumerate(tangents):
        plan = _plan(graph, tangent, derived) if position in dead else None
        if plan is None:
            kept.append(position)
        else:
            _apply(graph, *plan)
    copy.recompile()
    return copy, kept
