"""Capability-based partitioning into convex, acyclic, barrier-free regions.

The core (:func:`partition_dag`) knows no backend and no IR: it takes nodes in
topological order, their predecessors and a claim label per node, and groups
claimed nodes into regions in ``O(E log d)`` time (``d`` the largest fan-in).

How it stays convex and acyclic without reachability queries: every region
gets an integer id, and every node ``v`` an ``ext[v]`` -- an upper bound of the
ids of all regions that reach ``v``. A node may join region ``R`` only when
every predecessor outside ``R`` has ``ext < R.id``; so no path leaves ``R`` and
re-enters it, and every edge of the contracted graph goes from a lower id to a
higher one, which makes it acyclic. Regions merge when a node reads several of
them (``R_j`` merges into ``R_i`` when nothing reaches ``R_j`` from ``R_i`` or
later, tracked as ``in_ext[R_j] < R_i.id``); the merged region keeps the lower
id, which keeps the invariant. Fence nodes (mutations, side effects, random
ops) are virtual predecessors of every later node, so no region spans one.

Unlike torch.fx's ``CapabilityBasedPartitioner`` there is no per-merge graph
search: the bound is conservative (it may refuse a legal merge), never wrong.

After it, regions of a backend that opts in and that read one value and write one shape
merge horizontally (:mod:`.siblings`: a bounded search checks that no path joins them).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable, Dict, Hashable, Iterable, List, Optional, Sequence

from .recompute import recompute_into_consumers

__all__ = ["DagPartition", "partition_dag", "partition", "regions_from_meta"]


@dataclass
class DagPartition:
    """Result of :func:`partition_dag`: ``region_of[node] -> id``, ``regions[id] -> nodes``."""

    region_of: Dict[Hashable, int] = field(default_factory=dict)
    regions: List[List[Hashable]] = field(default_factory=list)
    labels: List[str] = field(default_factory=list)


class _UnionFind:
    def __init__(self) -> None:
        self.parent: List[int] = []

    def add(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:  # path compression
            self.parent[i], i = root, self.parent[i]
        return root


def partition_dag(
    order: Sequence[Hashable],
    preds: Callable[[Hashable], Iterable[Hashable]],
    label: Callable[[Hashable], Optional[str]],
    is_fence: Callable[[Hashable], bool] = lambda n: False,
) -> DagPartition:
    """Group claimed nodes into convex regions of one label each.

    ``order`` must be topological; ``label(n)`` is the claiming backend or
    ``None``; ``is_fence(n)`` marks nodes no region may span. Deterministic:
    the same inputs give the same regions, numbered by their first node.
    """
    uf = _UnionFind()
    region_label: List[str] = []   # by raw region id (ids grow with creation)
    in_ext: List[int] = []         # max ext of any predecessor outside the region
    ext: Dict[Hashable, int] = {}
    raw_region: Dict[Hashable, int] = {}
    fence_ext = -1                 # ext of the latest fence: a virtual predecessor of all
    for node in order:
        node_preds = list(preds(node))
        lab = None if is_fence(node) else label(node)
        if lab is None:
            bound = fence_ext
            for p in node_preds:
                bound = max(bound, ext[p])
            if is_fence(node):
                bound = max(bound, len(uf.parent) - 1)  # every region so far precedes it
                fence_ext = bound
            ext[node] = bound
            continue
        target = _choose_region(node_preds, lab, uf, raw_region, ext, in_ext, region_label, fence_ext)
        if target is None:
            target = uf.add()
            region_label.append(lab)
            bound = fence_ext
            for p in node_preds:
                bound = max(bound, ext[p])
            in_ext.append(bound)
        raw_region[node] = target
        ext[node] = target
    return _renumber(order, raw_region, uf, region_label)


def _choose_region(node_preds, lab, uf, raw_region, ext, in_ext, region_label, fence_ext):
    """The region ``node`` joins (merging candidates into it), or ``None``."""
    # Candidates: live regions of the same label among the predecessors.
    members: Dict[int, List[Hashable]] = {}
    outside_bound = fence_ext
    for p in node_preds:
        raw = raw_region.get(p)
        root = uf.find(raw) if raw is not None else None
        if root is not None and region_label[root] == lab:
            members.setdefault(root, []).append(p)
        else:
            outside_bound = max(outside_bound, ext[p])
    if not members:
        return None
    cands = sorted(members)  # ascending id
    # prefix[i]: max ext over predecessors in candidates before i (they stay outside)
    prefix = [outside_bound]
    for c in cands:
        prefix.append(max(prefix[-1], max(ext[p] for p in members[c])))
    # suffix[i]: max in_ext over candidates after i (they merge into candidate i)
    suffix = [-1] * (len(cands) + 1)
    for i in range(len(cands) - 1, -1, -1):
        suffix[i] = max(suffix[i + 1], in_ext[cands[i]])
    for i, root in enumerate(cands):
        if prefix[i] < root and suffix[i + 1] < root:
            for other in cands[i + 1:]:
                uf.parent[other] = root
                in_ext[root] = max(in_ext[root], in_ext[other])
            in_ext[root] = max(in_ext[root], prefix[i])
            return root
    return None


def _renumber(order, raw_region, uf, region_label) -> DagPartition:
    result = DagPartition()
    final_id: Dict[int, int] = {}
    for node in order:
        raw = raw_region.get(node)
        if raw is None:
            continue
        root = uf.find(raw)
        rid = final_id.get(root)
        if rid is None:
            rid = final_id[root] = len(result.regions)
            result.regions.append([])
            result.labels.append(region_label[root])
        result.region_of[node] = rid
        result.regions[rid].append(node)
    return result


# ---------------------------------------------------------------------------
# The pass over a GraphModule
# ---------------------------------------------------------------------------

_CLAIMABLE_OPS = ("call_function", "call_method")


def _claim(node, backends, declined_out: Dict[str, str]) -> Optional[str]:
    """Name of the first backend whose ``supports(node)`` is ``None``.

    The ``barriers`` pass asked the same backends already and left the answer in
    ``meta["claim"]`` (``(backends, name, declined)``); it is used, once, when the
    backends are the same objects.
    """
    cached = node.meta.pop("claim", None)
    if cached is not None and len(cached[0]) == len(backends) and \
            all(map(operator.is_, cached[0], backends)):
        declined_out.update(cached[2])
        return cached[1]
    for backend in backends:
        reason = backend.supports(node)
        if reason is None:
            return backend.name
        declined_out[backend.name] = str(reason)
    return None


def partition(gm, backends: Sequence) -> list:
    """Assign ``meta["region"]``/``meta["backend"]`` and return the ``Region`` list.

    ``backends`` are ``Backend`` objects (or registered names) in preference
    order; a node goes to the first whose ``supports(node)`` returns ``None``,
    and every refusal is kept in ``node.meta["declined"][backend] = reason``.
    Barrier nodes, placeholders, get_attr and output never join a region; a
    ``triton_op`` / ``tile_lang_op`` node may still be claimed alone (its
    ``meta["backend"]`` set, no ``meta["region"]``), so ``lower`` hands it to
    that backend as a one-node region that runs the op's registered kernel.
    """
    from ..backends.registry import resolve_backends
    from .siblings import merge_sibling_regions

    backends = resolve_backends(backends)
    nodes = list(gm.graph.nodes)
    claims: Dict[object, Optional[str]] = {}
    for node in nodes:
        node.meta.pop("region", None)
        node.meta.pop("backend", None)
        if node.op not in _CLAIMABLE_OPS or node.meta.get("barrier") is not None:
            claims[node] = None  # keep the barrier pass's meta["declined"]
            node.meta.pop("claim", None)
            _claim_alone(node, backends)
            continue
        node.meta.pop("declined", None)
        declined: Dict[str, str] = {}
        claims[node] = _claim(node, backends, declined)
        if declined:
            node.meta["declined"] = declined
    _epilogue_affinity(nodes, claims, backends)
    result = partition_dag(
        nodes,
        preds=lambda n: n.all_input_nodes,
        label=claims.__getitem__,
        is_fence=_is_fence,
    )
    result = merge_sibling_regions(
        result, nodes, {b.name for b in backends if getattr(b, "fuses_siblings", False)},
        shape_of=_shape, is_fence=_is_fence)
    for node, rid in result.region_of.items():
        node.meta["region"] = rid
        node.meta["backend"] = result.labels[rid]
    recompute_into_consumers(gm)
    return regions_from_meta(gm)


def _epilogue_affinity(nodes, claims: Dict[object, Optional[str]], backends) -> None:
    """A pointwise node that a backend would fuse into the kernel of its producer (a GEMM's
    epilogue: bias, activation, residual, scale, cast) joins the producer's backend even when
    another backend comes first for pointwise work: one kernel instead of two passes over
    the GEMM's output. Backends opt in with ``absorbs(producer, node) -> bool``;
    ``meta["epilogue_of"]`` marks the nodes that joined (a chain grows node by node)."""
    by_name = {b.name: b for b in backends}
    for node in nodes:
        node.meta.pop("epilogue_of", None)
    for node in nodes:
        mine = claims.get(node)
        if mine is None:
            continue
        for producer in node.all_input_nodes:
            owner = claims.get(producer)
            absorbs = getattr(by_name.get(owner), "absorbs", None)
            if owner is None or owner == mine or absorbs is None or not absorbs(producer, node):
                continue
            claims[node] = owner
            node.meta["epilogue_of"] = producer.meta.get("epilogue_of", producer.name)
            node.meta.setdefault("declined", {})[mine] = (
                f"joins {owner}'s kernel for {node.meta['epilogue_of']} as its epilogue")
            break


# Barriers that a backend may still run, alone, with the op's own registered kernel.
_CLAIMED_ALONE = ("triton_op", "tile_lang_op")


def _claim_alone(node, backends) -> None:
    """``meta["backend"]`` (no region) for a triton_op / tile_lang_op node a backend runs."""
    barrier = node.meta.get("barrier")
    if barrier is None or barrier.code not in _CLAIMED_ALONE:
        return
    declined: Dict[str, str] = {}
    name = _claim(node, backends, declined)
    if name is not None:
        node.meta["backend"] = name
    if declined:
        node.meta["declined"] = declined


def _shape(node) -> Optional[tuple]:
    meta = node.meta.get("tensor_meta")
    return tuple(meta.shape) if hasattr(meta, "shape") else None


def _is_fence(node) -> bool:
    barrier = node.meta.get("barrier")
    return bool(barrier is not None and getattr(barrier, "fence", False))


def regions_from_meta(gm) -> list:
    """Rebuild the ``Region`` records from ``meta["region"]``/``meta["backend"]``."""
    from ..backends.base import Region

    by_id: Dict[int, Region] = {}
    for node in gm.graph.nodes:
        rid = node.meta.get("region")
        if rid is None or node.op not in _CLAIMABLE_OPS:
            continue
        region = by_id.get(rid)
        if region is None:
            region = by_id[rid] = Region(id=rid, backend=node.meta["backend"], nodes=[])
        region.nodes.append(node)
    for region in by_id.values():
        members = set(region.nodes)
        seen_inputs = set()
        for node in region.nodes:
            for inp in node.all_input_nodes:
                if inp not in members and inp not in seen_inputs:
                    seen_inputs.add(inp)
                    region.inputs.append(inp)
            if any(user not in members for user in node.users):
                region.outputs.append(node)
    return [by_id[k] for k in sorted(by_id)]

