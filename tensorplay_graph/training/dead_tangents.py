"""Backward graphs specialized for outputs the loss did not use.

Eager autograd never runs the backward of an output nobody differentiated (a causal LM's
``logits`` and ``past_key_values`` when ``loss`` is what ``backward()`` starts from); a compiled
backward taking a zero tensor for each such output reads it and keeps it allocated (GPT-2's
logits at 8x512: 412 MB). The joint graph accumulates each output's tangent with one
``add(tangent, gradient)``; for a tangent known to be dead that add is the gradient itself, so
the specialized graph drops the tangent (as it does one nothing reads). A dead tangent used
any other way stays an input (the caller passes zeros).
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from ..ir.meta import TensorMeta


def _same_value(a: Any, b: Any) -> bool:
    ma, mb = a.meta.get("tensor_meta"), b.meta.get("tensor_meta")
    return isinstance(ma, TensorMeta) and isinstance(mb, TensorMeta) and \
        tuple(ma.shape) == tuple(mb.shape) and ma.dtype == mb.dtype


def _addend(user: Any, tangent: Any) -> Any:
    """The other operand when ``user`` is ``tangent + other`` (so equals ``other`` for a zero
    tangent, with ``other``'s shape and dtype); else None."""
    prim = user.meta.get("prim")
    if prim is None or prim.name != "add":
        return None
    # the node's own operands: ``prim_args`` of a copied graph may name the original's nodes
    if len(user.args) != 2 or set(user.kwargs) - {"alpha"}:
        return None
    (a, b), alpha = user.args, user.kwargs.get("alpha", 1)
    if a is tangent and b is not tangent and alpha == 1:
        other = b
    elif b is tangent and a is not tangent:
        other = a
    else:
        return None
    return other if hasattr(other, "meta") and _same_value(other, user) else None


def drop_dead_tangents(gm: Any, n_saved: int, dead: Sequence[int]) -> Tuple[Any, List[int]]:
    """A copy of the backward ``gm`` (inputs ``*saved, *tangents``) without the tangents at
    positions ``dead`` that only feed ``tangent + gradient`` adds; and the positions of the
    tangents the copy still takes, in order."""
    from ..compiler import copy_graph_module
    copy = copy_graph_module(gm)
    graph = copy.graph
    tangents = [n for n in graph.nodes if n.op == "placeholder"][n_saved:]
    kept = []
    for position, tangent in enumerate(tangents):
        users = list(tangent.users)
        others = [_addend(u, tangent) for u in users]
        if position not in dead or any(o is None for o in others):
            kept.append(position)
            continue
        for user, other in zip(users, others):
            user.replace_all_uses_with(other)
            graph.erase_node(user)
        graph.erase_node(tangent)
    copy.recompile()
    return copy, kept
