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
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..backends.base import region_subgraph
from ..errors import LoweringError
from ..ir.node import Node, map_aggregate, map_arg
from ..progress import tracked
from .eager_layout import needs_eager_layout, to_eager_layout
from .partition import regions_from_meta

__all__ = ["lower", "region_subgraph", "RegionGraph"]

log = logging.getLogger(__name__)


class _Ref:
    """A reference, by name, to another value of a ``RegionGraph`` (not a user string)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


_RECORDED_META = ("tensor_meta", "stack", "prim", "prim_args")


_LEAVES = frozenset({int, float, bool, str, type(None)})


def _compact(value: Any) -> Any:
    """``value`` with every Node replaced by a ``_Ref`` (hot: one call per arg of every
    region node, so common leaves and plain containers take the fast paths)."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is Node:
        return _Ref(value.name)
    if kind is tuple:
        return tuple([_compact(v) for v in value])
    if isinstance(value, dict):  # ImmutableDict kwargs too; create_node freezes it again
        return {k: _compact(v) for k, v in value.items()} if value else {}
    if isinstance(value, (tuple, list, slice)):
        return map_arg(value, lambda n: _Ref(n.name))
    return value


class RegionGraph:
    """The graph a region's kernel was compiled from, kept compactly and built on demand.

    ``lower`` stores one in ``meta["subgraph"]`` of each kernel call. It records
    each region node's name, opcode, target, args and its ``tensor_meta`` /
    ``stack`` / ``prim`` / ``prim_args`` with Node references turned into names,
    so it keeps neither the pre-lowering graph nor example values alive.
    ``.graph()`` builds the same ``Graph`` as ``region_subgraph`` (placeholders
    for the inputs, a tuple output); any other attribute (``.nodes``,
    ``.python_code()``) is read from that graph, built once on first use.
    """

    __slots__ = ("inputs", "records", "outputs", "_graph")

    def __init__(self, region) -> None:
        self.inputs = tuple((n.name, n.meta.get("tensor_meta")) for n in region.inputs)
        self.records = tuple(
            (n.name, n.op, n.target, _compact(n.args), _compact(n.kwargs),
             tuple((k, _compact(n.meta[k])) for k in _RECORDED_META if k in n.meta))
            for n in region.nodes)
        self.outputs = tuple(o.name for o in region.outputs)
        self._graph = None

    @property
    def names(self) -> List[str]:
        return [record[0] for record in self.records]

    def graph(self) -> Any:
        """A new standalone ``Graph`` of the region."""
        from ..ir import Graph

        sub = Graph()
        env: Dict[str, Any] = {}

        def resolve(value: Any) -> Any:
            return map_aggregate(value, lambda x: env[x.name] if isinstance(x, _Ref) else x)

        for name, tensor_meta in self.inputs:
            env[name] = sub.placeholder(name)
            if tensor_meta is not None:
                env[name].meta["tensor_meta"] = tensor_meta
        for name, op, target, args, kwargs, meta in self.records:
            env[name] = sub.create_node(op, target, resolve(args), resolve(kwargs), name=name)
            env[name].meta.update((key, resolve(value)) for key, value in meta)
        sub.output(tuple(env[name] for name in self.outputs))
        return sub

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self._graph is None:
            self._graph = self.graph()
        return getattr(self._graph, attr)

    def __repr__(self) -> str:
        return f"<RegionGraph of {len(self.records)} nodes: {', '.join(self.names[:8])}" + \
            (", ...>" if len(self.records) > 8 else ">")


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


def strict_lowering() -> bool:
    """``TPG_STRICT_LOWERING=1``: a compile failure raises instead of running eagerly
    (tests and the fuzzer use it to catch a ``supports()`` that claims too much)."""
    return os.environ.get("TPG_STRICT_LOWERING", "0") not in ("", "0")


def _fall_back(region, exc: Exception) -> None:
    """Leave ``region``'s nodes in the graph (eager dispatch), saying why at WARNING."""
    reason = str(exc)
    log.warning("region %d (%s) runs eagerly: %s", region.id, region.backend, reason)
    for node in region.nodes:
        node.meta.pop("region", None)
        node.meta.pop("backend", None)
        node.meta["lowering_fallback"] = reason


def lower(gm, regions: Optional[Sequence] = None, backends: Optional[Sequence] = None,
          strict: Optional[bool] = None) -> Any:
    """Replace every region by a call to ``backend.compile(region)``; returns ``gm``.

    ``regions`` default to those recorded in node meta by ``partition``;
    ``backends`` (objects or names) are looked up by region backend name,
    falling back to the registry. A region whose compile fails keeps its nodes,
    which run eagerly (WARNING logged, reason in ``meta["lowering_fallback"]``);
    a kernel that fails on its first call does the same (see ``_FirstCallGuard``).
    ``strict`` (default: ``TPG_STRICT_LOWERING``) raises the failure instead.
    """
    from ..backends.registry import get_backend

    if strict is None:
        strict = strict_lowering()
    if regions is None:
        regions = regions_from_meta(gm)
    alone = _claimed_alone(gm, start_id=1 + max((r.id for r in regions), default=-1))
    if not regions and not alone:
        return gm
    table = _backend_table(backends)
    for backend in table.values():  # optional: start the builds it will need side by side
        if callable(getattr(backend, "prepare", None)):
            backend.prepare([r for r in regions if r.backend == backend.name])
    kernels = {}
    failed = set()
    for region in tracked([*regions, *alone], "building kernels"):
        backend = table.get(region.backend) or get_backend(region.backend)
        try:
            kernel = _compile(region, backend)
        except LoweringError as exc:
            if strict:
                raise
            _fall_back(region, exc)
            failed.add(region.id)
            continue
        graph = RegionGraph(region)
        if not strict and region not in alone:
            kernel = _FirstCallGuard.wrap(kernel, graph, region)
        kernels[region.id] = (kernel, graph)
        log.debug("lowered region %d (%d nodes) to %s", region.id, len(region.nodes), kernel)
    regions = [r for r in regions if r.id not in failed]
    alone = [r for r in alone if r.id not in failed]
    alone_kernels = {r.nodes[0]: kernels[r.id][0] for r in alone}
    gm.graph = _rebuild(gm.graph, regions, kernels, alone_kernels)
    return gm


class _FirstCallGuard:
    """Runs a kernel's first call; if it raises (a JIT that compiles at launch), the
    region runs eagerly from then on, with a WARNING. It is ``kernel.first_call`` and
    clears itself after one success, so later calls go straight to ``kernel.fn``."""

    def __init__(self, kernel, graph: "RegionGraph", region) -> None:
        self.kernel, self.graph = kernel, graph
        self.label = f"region {region.id} ({region.backend}: {', '.join(region.names)})"

    @classmethod
    def wrap(cls, kernel, graph: "RegionGraph", region):
        if hasattr(kernel, "first_call"):
            kernel.first_call = cls(kernel, graph, region)
        return kernel

    def __call__(self, *args: Any) -> Any:
        kernel = self.kernel
        try:
            out = kernel.fn(*args)
        except Exception as exc:
            from ..ir import GraphModule

            reason = f"{type(exc).__name__}: {exc}"
            log.warning("%s failed on its first call and runs eagerly from now on: %s",
                        self.label, reason)
            eager = GraphModule({}, self.graph.graph())
            kernel.fn = lambda *a: tuple(eager(*a))
            kernel.launch["fallback"] = reason
            out = kernel.fn(*args)
        kernel.first_call = None
        return out


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
    _remap_prim_args(call, env)
    if isinstance(node.meta.get("tensor_meta"), tuple):
        call.meta["tensor_meta"] = node.meta["tensor_meta"]
        return call
    item = new.call_function(operator.getitem, (call, 0), name=node.name)
    item.meta.update({k: v for k, v in node.meta.items() if k in ("tensor_meta", "val", "stack")})
    return item


def _remap_prim_args(node, env) -> None:
    """Point copied ``prim_args`` at the new nodes: a reference to an old node would keep
    the whole pre-lowering graph alive (it links to its neighbours and users)."""
    prim_args = node.meta.get("prim_args")
    if prim_args:
        node.meta["prim_args"] = map_arg(prim_args, lambda n: env.get(n, n))


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
            _remap_prim_args(env[unit], env)
            continue
        kernel, subgraph = kernels[unit.id]
        call = new.call_function(kernel, tuple(env[i] for i in unit.inputs),
                                 name=f"{unit.backend}_region{unit.id}")
        call.meta.update(kernel=kernel, subgraph=subgraph, region=unit.id, backend=unit.backend,
                         tensor_meta=tuple(o.meta.get("tensor_meta") for o in unit.outputs))
        for i, out in enumerate(unit.outputs):
            env[out] = _emit_output(new, call, i, out)
    return new


def _emit_output(new, call, i: int, out) -> Any:
    """``call[i]`` named like ``out``; through ``to_eager_layout`` when eager's strides for
    ``out`` are not row-major (a kernel writes row-major unless its ``launch["eager_strides"]``
    says it wrote output ``i`` with them; reshape / contiguous / in-place writes through
    aliases must see eager's layout: ``eager_layout.py``)."""
    kept = {k: v for k, v in out.meta.items() if k in ("tensor_meta", "val", "stack")}
    written = call.meta["kernel"].launch.get("eager_strides", ())
    stride = None if i < len(written) and written[i] else \
        needs_eager_layout(out.meta.get("tensor_meta"))
    item = new.call_function(operator.getitem, (call, i),
                             name=out.name if stride is None else f"{out.name}_rowmajor")
    item.meta.update(kept)
    if stride is None:
        return item
    laid = new.call_function(to_eager_layout, (item, stride), name=out.name)
    laid.meta.update(kept)
    return laid
