"""``normalize``: map framework calls to prims.

For each ``call_function`` / ``call_method`` node that a prim expresses, sets
``node.meta["prim"]`` (the :class:`~tensorplay_graph.prims.Prim`) and
``node.meta["prim_args"]`` (canonical argument name -> value; values may be
Nodes). Targets are kept, so the graph still runs eagerly. Unknown ops get no
prim; the ``barriers`` pass marks them. Linear time: one dict hit per node.

A cast to the dtype the input already has (``x.float()`` on float32,
``x.to(x.dtype)``) and ``contiguous()`` on a contiguous input return the input
*itself* in eager, so a later in-place write through either name is seen
through both. Such nodes are replaced by their input (when its metadata is
known); the ones whose input is unknown keep an ``alias`` barrier instead.

>>> gm = normalize(gm)                                   # doctest: +SKIP
>>> gm.graph.find_nodes(op="call_function")[0].meta["prim"]   # doctest: +SKIP
<prim add (pointwise)>
"""

from __future__ import annotations

import logging
from typing import Any

from .. import prims
from ..frameworks.graphs import graph_framework
from ..ir.meta import TensorMeta
from ..prims.rules import wrap_dim

logger = logging.getLogger(__name__)

__all__ = ["normalize", "graph_framework"]


def _graph_of(gm: Any) -> Any:
    return getattr(gm, "graph", gm)


def _noop_alias_source(node: Any) -> Any:
    """The input a cast / contiguous / flatten node returns unchanged in eager, else None."""
    prim = node.meta.get("prim")
    if prim is None or prim.name not in ("cast", "contiguous", "flatten"):
        return None
    if node.kwargs.get("copy") is True or node.kwargs.get("memory_format") is not None:
        return None
    args = node.meta.get("prim_args", {})
    source = args.get("a")
    meta = getattr(source, "meta", {}).get("tensor_meta")
    if not isinstance(meta, TensorMeta):
        return None
    if prim.name == "cast":
        return source if args.get("dtype") == meta.dtype else None
    if prim.name == "flatten":  # both frameworks return self when no dims merge (1-D: always)
        return source if meta.ndim and wrap_dim(args["start_dim"], meta.ndim, "flatten") == \
            wrap_dim(args["end_dim"], meta.ndim, "flatten") else None
    return source if meta.is_contiguous else None


def normalize(gm: Any) -> Any:
    """Set ``meta["prim"]`` / ``meta["prim_args"]`` on every node a prim expresses.

    Accepts a GraphModule or a Graph and returns it. Nodes normalized earlier
    are recomputed (args may have changed); stale keys are removed.
    """
    graph = _graph_of(gm)
    framework = None
    matched = folded = 0
    for node in list(graph.nodes):  # a folded node is erased; its users come later
        if node.op not in ("call_function", "call_method"):
            continue
        if node.op == "call_method" and framework is None:
            framework = graph_framework(graph)
        found = prims.lookup(node, framework or "torch")
        if found is None:
            node.meta.pop("prim", None)
            node.meta.pop("prim_args", None)
            continue
        node.meta["prim"], node.meta["prim_args"] = found
        source = _noop_alias_source(node)
        if source is not None:
            node.replace_all_uses_with(source)
            graph.erase_node(node)
            folded += 1
            continue
        matched += 1
    logger.debug("normalize: %d nodes mapped to prims, %d no-op casts folded", matched, folded)
    return gm
