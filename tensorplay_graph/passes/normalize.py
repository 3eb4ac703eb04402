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
from typing import Any, Tuple

from .. import prims
from ..frameworks import framework_of
from ..ir.meta import TensorMeta

logger = logging.getLogger(__name__)

__all__ = ["normalize", "graph_framework"]


def _graph_of(gm: Any) -> Any:
    return getattr(gm, "graph", gm)


def graph_framework(graph: Any) -> str:
    """``"tensorplay"`` or ``"torch"``: the framework whose method conventions apply.

    Taken from the first placeholder carrying an example value (``meta["val"]``),
    else from the first call target defined in a TensorPlay module; torch otherwise.
    The scan is remembered until the graph changes (backends ask once per region, and a
    graph of ``operator`` calls only is read to its end each time); the example values
    of the placeholders it passed are read again on every call.
    """
    version = getattr(graph, "_version", None)
    memo = getattr(graph, "_framework_memo", None)
    if memo is None or version is None or memo[0] != version:
        memo = (version, *_scan_framework(graph))
        if version is not None:
            graph._framework_memo = memo
    for node in memo[1]:
        framework = framework_of(node.meta.get("val"))
        if framework is not None:
            return framework
    return memo[2]


def _scan_framework(graph: Any) -> Tuple[Tuple[Any, ...], str]:
    """(placeholders before the first call whose target names a framework, that framework)."""
    placeholders = []
    for node in graph.nodes:
        if node.op == "placeholder":
            placeholders.append(node)
        elif node.op == "call_function":
            module = getattr(node.target, "__module__", None) or ""
            qualname = getattr(node.target, "__qualname__", "") or ""
            if module.startswith("tensorplay.") or module == "tensorplay" or \
                    qualname.startswith("TensorBase."):
                return tuple(placeholders), "tensorplay"
            if module.startswith("torch"):
                return tuple(placeholders), "torch"
    return tuple(placeholders), "torch"


def _noop_alias_source(node: Any) -> Any:
    """The input a cast / contiguous node returns unchanged in eager, else None."""
    prim = node.meta.get("prim")
    if prim is None or prim.name not in ("cast", "contiguous"):
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
