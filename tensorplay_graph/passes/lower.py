"""The ``lower`` pass: each region becomes one call to its compiled ``Kernel``.

For every region (``meta["region"]``/``meta["backend"]`` from ``partition``)
the backend compiles a ``Region`` into a ``Kernel``; the region's nodes are
replaced by ``kernel_call = kernel(*inputs)`` followed by one
``operator.getitem(kernel_call, i)`` per output, named like the outputs they
replace so the generated code still reads like the program. Unclaimed nodes
are copied unchanged and run through eager dispatch.

The new node order is a stable topological sort of the contracted graph
(regions as single units, original positions as priorities), done segment by
segment between fence nodes (mutations, side effects, random ops): nothing
crosses a fence, so every reader and writer of a mutated tensor keeps its
order. ``O((V + E) log V)``.
"""

from __future__ import annotations

import heapq
import logging
import operator
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import LoweringError
from .partition import regions_from_meta

__all__ = ["lower", "region_subgraph"]

log = logging.getLogger(__name__)


def region_subgraph(region) -> Any:
    """A standalone ``Graph`` of ``region``: placeholders for its inputs, a tuple output."""
    from ..ir import Graph

    sub = Graph()
    env: Dict[Any, Any] = {}
    for inp in region.inputs:
        ph = sub.placeholder(inp.name)
        ph.meta = {k: v for k, v in inp.meta.items() if k in ("tensor_meta", "val")}
        env[inp] = ph
    for node in region.nodes:
        env[node] = sub.node_copy(node, lambda n: env[n])
    sub.output(tuple(env[o] for o in region.outputs))
    return sub


def _backend_table(backends: Optional[Sequence]) -> Dict[str, Any]:
    from ..backends.registry import resolve_backends

    return {b.name: b for b in resolve_backends(backends or [])}


def _compile(region, backend) -> Any:
    try:
        kernel = backend.compile(region)
    except LoweringError:
        raise
    except Exception as exc:
        raise LoweringError(
            f"backend {region.backend!r} accepted region {region.id} "
            f"({', '.join(region.names)}) but failed to compile it: {type(exc).__name__}: {exc}. "
            f"Fix the backend's supports() to decline these nodes, or its compile()") from exc
    if not callable(kernel):
        raise LoweringError(f"backend {region.backend!r} returned {kernel!r} for region "
                            f"{region.id}; compile() must return a Kernel")
    return kernel


def lower(gm, regions: Optional[Sequence] = None, backends: Optional[Sequence] = None) -> Any:
    """Replace every region by a call to ``backend.compile(region)``; returns ``gm``.

    ``regions`` default to those recorded in node meta by ``partition``;
    ``backends`` (objects or names) are looked up by region backend name,
    falling back to the registry.
    """
    from ..backends.registry import get_backend

    if regions is None:
        regions = regions_from_meta(gm)
    alone = _claimed_alone(gm, start_id=1 + max((r.id for r in regions), default=-1))
    if not regions and not alone:
        return gm
    table = _backend_table(backends)
    kernels = {}
    for region in [*regions, *alone]:
        backend = table.get(region.backend) or get_backend(region.backend)
        kernels[region.id] = (_compile(region, backend), region_subgraph(region))
        log.debug("lowered region %d (%d nodes) to %s", region.id, len(region.nodes),
                  kernels[region.id][0])
    alone_kernels = {r.nodes[0]: kernels[r.id][0] for r in alone}
    gm.graph = _rebuild(gm.graph, regions, kernels, alone_kernels)
    return gm


def _claimed_alone(gm, start_id: int) -> list:
    """One-node regions for barrier nodes that partition let a backend run alone."""
    from ..backends.base import Region

    alone = []
    for node in gm.graph.nodes:
        if node.meta.get("barrier") is None or node.meta.get("region") is not None:
            continue
        backend = node.meta.get("backend")
        if backend is not None:
            alone.append(Region(id=start_id + len(alone), backend=backend, nodes=[node],
                                inputs=list(node.all_input_nodes), outputs=[node]))
    return alone


def _units(graph, regions):
    """Original nodes grouped into units: a region is one unit, every other node its own."""
    region_of = {n: r for r in regions for n in r.nodes}
    units: List[Any] = []       # node or Region, in order of first appearance
    unit_of: Dict[Any, int] = {}
    seen_region: Dict[int, int] = {}
    for node in graph.nodes:
        region = region_of.get(node)
        if region is None:
            unit_of[node] = len(units)
            units.append(node)
        else:
            if region.id not in seen_region:
                seen_region[region.id] = len(units)
                units.append(region)
            unit_of[node] = seen_region[region.id]
    return units, unit_of


def _unit_inputs(unit) -> List[Any]:
    return list(unit.inputs) if hasattr(unit, "nodes") else unit.all_input_nodes


def _is_fence(unit) -> bool:
    barrier = getattr(unit, "meta", {}).get("barrier") if not hasattr(unit, "nodes") else None
    return bool(barrier is not None and getattr(barrier, "fence", False))


def _unit_label(unit) -> str:
    return f"region {unit.id}" if hasattr(unit, "nodes") else unit.name


def _stable_order(units, unit_of) -> List[int]:
    """Unit indices in a topological order closest to the original one, fences fixed."""
    order: List[int] = []
    segment: List[int] = []

    def flush():
        members = set(segment)
        indeg = {u: 0 for u in segment}
        users: Dict[int, List[int]] = {u: [] for u in segment}
        for u in segment:
            for dep in {unit_of[i] for i in _unit_inputs(units[u])}:
                if dep in members and dep != u:
                    indeg[u] += 1
                    users[dep].append(u)
        ready = [u for u in segment if indeg[u] == 0]
        heapq.heapify(ready)
        emitted = 0
        while ready:
            u = heapq.heappop(ready)
            order.append(u)
            emitted += 1
            for v in users[u]:
                indeg[v] -= 1
                if indeg[v] == 0:
                    heapq.heappush(ready, v)
        if emitted != len(segment):
            stuck = ", ".join(_unit_label(units[u]) for u in segment if indeg[u] > 0)
            raise LoweringError(
                f"regions are not convex: contracting them makes a cycle through {stuck}; "
                "partition with tensorplay_graph.passes.partition, which never builds such regions")
        segment.clear()

    for idx, unit in enumerate(units):
        if _is_fence(unit):
            flush()
            order.append(idx)
        else:
            segment.append(idx)
    flush()
    return order


def _emit_alone(new, node, kernel, env) -> Any:
    """``kernel(*inputs)`` for a node run alone; a getitem unless the op returns a tuple."""
    call = new.call_function(kernel, tuple(env[i] for i in node.all_input_nodes),
                             name=f"{node.name}_kernel")
    call.meta.update({k: v for k, v in node.meta.items() if k != "tensor_meta"})
    call.meta["kernel"] = kernel
    if isinstance(node.meta.get("tensor_meta"), tuple):
        call.meta["tensor_meta"] = node.meta["tensor_meta"]
        return call
    item = new.call_function(operator.getitem, (call, 0), name=node.name)
    item.meta.update({k: v for k, v in node.meta.items() if k in ("tensor_meta", "val", "stack")})
    return item


def _rebuild(graph, regions, kernels: Mapping[int, Any], alone: Mapping[Any, Any]):
    from ..ir import Graph

    units, unit_of = _units(graph, regions)
    new = Graph()
    env: Dict[Any, Any] = {}
    for idx in _stable_order(units, unit_of):
        unit = units[idx]
        if not hasattr(unit, "nodes"):
            kernel = alone.get(unit)
            env[unit] = (new.node_copy(unit, lambda n: env[n]) if kernel is None
                         else _emit_alone(new, unit, kernel, env))
            continue
        kernel, subgraph = kernels[unit.id]
        call = new.call_function(kernel, tuple(env[i] for i in unit.inputs),
                                 name=f"{unit.backend}_region{unit.id}")
        call.meta.update(kernel=kernel, subgraph=subgraph, region=unit.id, backend=unit.backend,
                         tensor_meta=tuple(o.meta.get("tensor_meta") for o in unit.outputs))
        for i, out in enumerate(unit.outputs):
            item = new.call_function(operator.getitem, (call, i), name=out.name)
            item.meta.update({k: v for k, v in out.meta.items()
                              if k in ("tensor_meta", "val", "stack")})
            env[out] = item
    return new
