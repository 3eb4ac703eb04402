"""Horizontal fusion: regions that read one value and write values of one shape become one.

After Llama's q / k / v projections are one GEMM (:mod:`.merge_linears`), three regions read
its result: q's rotary embedding, k's rotary embedding and its copy into the KV cache, v's
copy into the cache. Each is a kernel over the same ``(batch, heads, seq, head_dim)`` space;
one kernel computing all three saves two launches per layer and the gaps between them.

Two regions of a backend that opts in (``fuses_siblings``) merge when they read a common
value, every value either writes for outside readers has one shape (the same for both, so
the backend groups them into one kernel over it), no path joins them (through any node:
merging would make a cycle) and no fence lies between their first and last nodes (the
merged region runs at its first node's place; ``lower`` moves nothing across a fence).
"""

from __future__ import annotations

import bisect
from typing import Callable, Dict, Hashable, List, Sequence, Set

from .partition import DagPartition, _UnionFind

__all__ = ["merge_sibling_regions"]

#: nodes a reachability search visits before giving up on one pair (then: no merge)
SEARCH_LIMIT = 2000


def _output_shapes(members: Set[Hashable], shape_of: Callable) -> Set[tuple]:
    return {shape_of(n) for n in members if any(u not in members for u in n.users)}


def _reaches(sources: Set[Hashable], targets: Set[Hashable], last: int,
             position: Dict[Hashable, int]) -> bool:
    """Whether a path leads from ``sources`` to ``targets`` outside ``sources`` (positions up
    to ``last`` only: a path to a node cannot pass a later one). True when unsure."""
    stack = [u for n in sources for u in n.users if u not in sources]
    seen: Set[Hashable] = set()
    while stack:
        node = stack.pop()
        if node in targets:
            return True
        if node in seen or position.get(node, last + 1) > last:
            continue
        seen.add(node)
        if len(seen) > SEARCH_LIMIT:
            return True
        stack.extend(node.users)
    return False


def merge_sibling_regions(result: DagPartition, order: Sequence[Hashable], labels: Set[str],
                          shape_of: Callable, is_fence: Callable) -> DagPartition:
    """``result`` with sibling regions of ``labels`` merged (module docstring), renumbered by
    first node. ``shape_of(node)``: the shape of a node's value (None when unknown)."""
    if not labels or len(result.regions) < 2:
        return result
    position = {n: i for i, n in enumerate(order)}
    fences = [i for i, n in enumerate(order) if is_fence(n)]
    uf = _UnionFind()
    members: List[Set[Hashable]] = []
    for nodes in result.regions:
        uf.add()
        members.append(set(nodes))
    readers: Dict[Hashable, List[int]] = {}
    for rid, nodes in enumerate(result.regions):
        if result.labels[rid] not in labels:
            continue
        for node in nodes:
            for value in node.all_input_nodes:
                if value not in members[rid] and rid not in readers.setdefault(value, []):
                    readers[value].append(rid)
    merged_any = False
    for value, rids in readers.items():
        if len(rids) < 2:
            continue
        for other in rids[1:]:
            base, other = uf.find(rids[0]), uf.find(other)
            if base == other or result.labels[base] != result.labels[other]:
                continue
            a, b = members[base], members[other]
            shapes = _output_shapes(a, shape_of) | _output_shapes(b, shape_of)
            if len(shapes) != 1 or None in shapes:
                continue
            span = [position[n] for n in a | b]
            lo, hi = min(span), max(span)
            if bisect.bisect_right(fences, hi) > bisect.bisect_left(fences, lo):
                continue
            if _reaches(a, b, hi, position) or _reaches(b, a, hi, position):
                continue
            keep, gone = min(base, other), max(base, other)
            uf.parent[gone] = keep
            members[keep] = a | b
            merged_any = True
    if not merged_any:
        return result
    merged = DagPartition()
    final: Dict[int, int] = {}
    for node in order:
        rid = result.region_of.get(node)
        if rid is None:
            continue
        root = uf.find(rid)
        if root not in final:
            final[root] = len(merged.regions)
            merged.regions.append([])
            merged.labels.append(result.labels[root])
        merged.region_of[node] = final[root]
        merged.regions[final[root]].append(node)
    return merged
