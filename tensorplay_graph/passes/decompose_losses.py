"""``cross_entropy`` rewritten into prims that backends fuse (called by ``decompose``).

``F.cross_entropy(x, target)`` with class-index targets, no ``weight`` and no label
smoothing (:func:`~tensorplay_graph.prims.losses.plain_reduction`) becomes::

    rows  = cross_entropy_rows(x, target, ignore_index)     # one row pass, no log-probs
    none: rows
    sum:  rows.sum(dtype=float32).to(x.dtype)
    mean: (rows.sum(dtype=float32) / (target != ignore_index).sum()).to(x.dtype)

as eager's ``nll_loss`` accumulates (:func:`~tensorplay_graph.prims.losses.reduce_rows`,
shared with the training rewrite; float64 logits accumulate in float64). Calls that need
the gradient (logits that require grad) keep the framework's call and its own backward
here; the joint graph rewrites those (``prims/losses.py`` says why that differs).
"""

from __future__ import annotations

import logging
from typing import List

from ..errors import TensorPlayGraphError
from ..ir.node import Node
from ..prims.emit import Emitter, NotDifferentiable
from ..prims.losses import plain_reduction, reduce_rows

log = logging.getLogger(__name__)

__all__ = ["decompose_cross_entropy"]


def _inserted(first: Node, node: Node) -> List[Node]:
    """The nodes between ``first`` and ``node`` (those inserted before ``node``), in order."""
    found, at = [], node.prev
    while at is not first:
        found.append(at)
        at = at.prev
    return found[::-1]


def decompose_cross_entropy(node: Node, framework: str) -> bool:
    """Rewrite one ``cross_entropy`` node (module docstring); False leaves it as it was."""
    args = node.meta["prim_args"]
    mode = plain_reduction(args)
    if mode is None or Emitter.meta(args["a"]).requires_grad:
        return False
    a, target, ignore = args["a"], args["target"], args["ignore_index"]
    graph, first = node.graph, node.prev
    e = Emitter(graph, framework)
    try:
        with graph.inserting_before(node):
            rows = e.cross_entropy_rows(a, target, ignore)
            valid = e.ne(target, ignore) if mode == "mean" else None
            result = reduce_rows(e, rows, valid, mode)
    except (TensorPlayGraphError, NotDifferentiable, TypeError, ValueError) as exc:
        # a meta rule refused (a target not shaped like the rows): keep the framework's call
        log.debug("decompose: cross_entropy %s kept: %s", node.name, exc)
        for made in reversed(_inserted(first, node)):
            graph.erase_node(made)
        return False
    for made in _inserted(first, node):
        made.meta["stack"] = node.meta.get("stack")
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return True
