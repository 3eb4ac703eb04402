"""Recompute cheap values in the region that reads them instead of writing them out.

After partitioning, a Triton region may read values another Triton region computed only from
its own inputs through pointwise and view nodes -- GPT-2's gelu backward reads four pieces of
the recomputed gelu (``0.5 * x``, ``1 + tanh(...)``, ``1 - tanh^2``, ``x * x``) that the region
before the GEMM wrote: 125 MB written and read again per layer, for one 25 MB input. Here the
reading region computes such a value itself, from the producing region's inputs, when the
bytes it newly reads are fewer than those saved (its read of the value, and the producer's
write when no one else reads it). Inductor inlines pointwise producers into their consumers
the same way. The producing region then writes only what others still read. Graphs that
write in place are left alone: a write could land between the two regions.

>>> recompute_into_consumers(gm)      # after partition, before lower   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from ..ir.effects import is_inplace
from ..ir.meta import TensorMeta
from ..ir.node import map_arg

#: the backends whose regions take recomputed values (their kernels inline views)
BACKENDS = ("triton",)
#: the longest chain computed again in the reading region
MAX_CHAIN = 32



def _bytes(node: Any) -> int:
    meta = node.meta.get("tensor_meta")
    return meta.nbytes if isinstance(meta, TensorMeta) else 0


def _cheap(node: Any) -> bool:
    prim = node.meta.get("prim")
    return prim is not None and prim.kind in ("pointwise", "view") and \
        isinstance(node.meta.get("tensor_meta"), TensorMeta)


def _chain(value: Any, region: int) -> Optional[List[Any]]:
    """``value`` and the nodes of ``region`` it is computed from, operands first, when all
    are cheap and reach outside the region only through inputs; else None."""
    found: List[Any] = []
    seen: Set[Any] = set()

    def visit(node: Any) -> bool:
        if node in seen:
            return True
        seen.add(node)
        if not _cheap(node) or len(seen) > MAX_CHAIN:
            return False
        if not all(visit(v) for v in node.all_input_nodes if v.meta.get("region") == region):
            return False
        found.append(node)
        return True
    return found if visit(value) else None


def _sources(chain: List[Any]) -> List[Any]:
    members = set(chain)
    return list(dict.fromkeys(v for n in chain for v in n.all_input_nodes if v not in members))


def _clone(chain: List[Any], region: int, before: Any) -> Any:
    """Copies of ``chain`` in ``region``, inserted before ``before``; the copy of its last."""
    graph = before.graph
    copies: Dict[Any, Any] = {}
    with graph.inserting_before(before):
        for node in chain:
            args = map_arg(node.args, lambda n: copies.get(n, n))
            kwargs = map_arg(node.kwargs, lambda n: copies.get(n, n))
            copy = graph.create_node(node.op, node.target, args, kwargs, name=node.name)
            copy.meta = dict(node.meta)
            copy.meta["prim_args"] = map_arg(node.meta["prim_args"], lambda n: copies.get(n, n))
            copy.meta["region"] = region
            copy.meta["recomputed_from"] = node.name
            copies[node] = copy
    return copies[chain[-1]]


def _reads(nodes: List[Any], region: int) -> Set[Any]:
    return {v for n in nodes for v in n.all_input_nodes if v.meta.get("region") != region}


def recompute_into_consumers(gm: Any) -> int:
    """Apply the rewrite in the module docstring to ``gm`` (partitioned); the number of
    values now computed again where they are read."""
    graph = gm.graph
    if not any(n.meta.get("backend") in BACKENDS and n.meta.get("region") is not None
               for n in graph.nodes):
        return 0
    if any(n.op in ("call_function", "call_method") and is_inplace(n) for n in graph.nodes):
        # a write may land between the region computing a value and the one reading it
        return 0
    by_region: Dict[int, List[Any]] = {}
    for node in graph.nodes:
        if node.meta.get("region") is not None:
            by_region.setdefault(node.meta["region"], []).append(node)
    reads = {rid: _reads(nodes, rid) for rid, nodes in by_region.items()}
    clones: Dict[Tuple[int, Any], Any] = {}
    changed = 0
    for consumer in list(graph.nodes):
        mine = consumer.meta.get("region")
        if mine is None or consumer.meta.get("backend") not in BACKENDS:
            continue
        for value in list(dict.fromkeys(consumer.all_input_nodes)):
            theirs = value.meta.get("region")
            if theirs is None or theirs == mine or value.meta.get("backend") not in BACKENDS:
                continue
            copy = clones.get((mine, value))
            if copy is None:
                chain = _chain(value, theirs)
                if chain is None:
                    continue
                sources = _sources(chain)
                # saved: this region's read of the value, and its producer's write when no
                # one else reads it (a view is no write); spent: what this region did not
                # read yet
                unread = value.meta["prim"].kind != "view" and all(
                    u.meta.get("region") in (mine, theirs) for u in value.users)
                saved = _bytes(value) * (2 if unread else 1)
                if sum(_bytes(s) for s in sources if s not in reads[mine]) >= saved:
                    continue
                copy = clones[(mine, value)] = _clone(chain, mine, consumer)
                reads[mine].update(sources)
                changed += 1
            consumer.replace_input_with(value, copy)
            if "prim_args" in consumer.meta:
                consumer.meta["prim_args"] = map_arg(consumer.meta["prim_args"],
                                                     lambda n: copy if n is value else n)
    if changed:
        _drop_unread(graph)
    return changed


def _drop_unread(graph: Any) -> None:
    """Region nodes nothing reads any more (their readers compute them now)."""
    for node in reversed(list(graph.nodes)):
        if node.meta.get("region") is not None and not node.users and _cheap(node):
            graph.erase_node(node)
