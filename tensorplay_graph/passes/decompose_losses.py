"""``cross_entropy`` rewritten into prims that backends fuse (called by ``decompose``).

``F.cross_entropy(x, target)`` with class-index targets, no ``weight`` and no label
smoothing becomes::

    rows  = cross_entropy_rows(x, target, ignore_index)     # one row pass, no log-probs
    none: rows
    sum:  rows.sum(dtype=float32).to(x.dtype)
    mean: (rows.sum(dtype=float32) / (target != ignore_index).sum()).to(x.dtype)

as eager's ``nll_loss`` accumulates (float32 sums of the rows and of the counted targets;
all targets ignored gives 0 / 0 = NaN, as eager). Float64 logits accumulate in float64.
Calls that need the gradient (logits that require grad) keep the framework's call and its
own backward; so do probability targets, ``weight`` and ``label_smoothing``.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, List

from ..frameworks import adapter_for
from ..ir.meta import TensorMeta
from ..ir.node import Node
from ..prims.losses import cross_entropy_rows, legacy_reduction

log = logging.getLogger(__name__)

__all__ = ["decompose_cross_entropy"]


def _meta(value: Any) -> Any:
    meta = value.meta.get("tensor_meta") if isinstance(value, Node) else None
    return meta if isinstance(meta, TensorMeta) else None


def _fits(args: dict) -> bool:
    a, target = _meta(args.get("a")), _meta(args.get("target"))
    ignore = args.get("ignore_index", -100)
    return (a is not None and target is not None and not a.requires_grad
            and args.get("weight") is None and args.get("label_smoothing") in (0, 0.0)
            and target.dtype.startswith(("int", "uint")) and isinstance(ignore, int)
            and not isinstance(ignore, bool)
            and legacy_reduction(args.get("size_average"), args.get("reduce"),
                                 args.get("reduction", "mean")) in ("none", "mean", "sum"))


def decompose_cross_entropy(node: Node, framework: str) -> bool:
    """Rewrite one ``cross_entropy`` node (module docstring); False leaves it as it was."""
    from .decompose import annotate

    args = node.meta["prim_args"]
    if not _fits(args):
        return False
    a, target, ignore = args["a"], args["target"], args["ignore_index"]
    logits = _meta(a).dtype
    mode = legacy_reduction(args.get("size_average"), args.get("reduce"), args["reduction"])
    acc = "float64" if logits == "float64" else "float32"
    dtype = adapter_for(framework).dtype
    graph = node.graph
    created: List[Node] = []

    def add(kind: str, target_: Any, args_: tuple, kwargs: dict = None) -> Node:
        made = (graph.call_function if kind == "function" else graph.call_method)(
            target_, args_, kwargs or {})
        made.meta["stack"] = node.meta.get("stack")
        created.append(made)
        if not annotate(made, framework):
            raise ValueError(f"no prim for {made.format_node() if hasattr(made, 'format_node') else made}")
        return made

    try:
        with graph.inserting_before(node):
            result = add("function", cross_entropy_rows, (a, target), {"ignore_index": ignore})
            if mode != "none":
                result = add("method", "sum", (result,), {"dtype": dtype(acc)})
                if mode == "mean":
                    valid = add("function", operator.ne, (target, ignore))
                    result = add("function", operator.truediv, (result, add("method", "sum", (valid,))))
                if logits != acc:
                    result = add("method", "to", (result, dtype(logits)))
    except ValueError as exc:  # a prim or meta rule refused: keep the framework's call
        log.debug("decompose: cross_entropy %s kept: %s", node.name, exc)
        for made in reversed(created):
            graph.erase_node(made)
        return False
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return True
