"""The Backend protocol, Region and Kernel records, and the backend registry."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, runtime_checkable

from ..ir.node import Node


@dataclass
class Region:
    """A convex, barrier-free set of nodes claimed by one backend.

    ``nodes`` are in graph (topological) order; ``inputs`` are the values the
    region reads from outside (nodes or constants), in first-use order;
    ``outputs`` are the region nodes read outside the region, in graph order.
    """

    id: int
    backend: str
    nodes: List[Node]
    inputs: List[Node] = field(default_factory=list)
    outputs: List[Node] = field(default_factory=list)

    @property
    def names(self) -> List[str]:
        return [n.name for n in self.nodes]


@dataclass(eq=False)
class Kernel:
    """A compiled region: ``fn(*input_values) -> tuple(output_values)``.

    ``source`` and ``launch`` are kept for inspection (``explain()``, render).
    Compared and hashed by identity: a Kernel is a graph node's target.
    """

    name: str
    backend: str
    fn: Callable[..., Any]
    source: str = ""
    launch: Dict[str, Any] = field(default_factory=dict)
    #: set by ``lower``: runs the first call, falling back to eager if it fails, then clears itself
    first_call: Optional[Callable[..., Any]] = field(default=None, repr=False)
    #: ``pad_rows(output, width, pitch) -> bool``: have the kernel write that output into
    #: zero-padded rows (:mod:`.padded_rows`); None where the backend cannot
    pad_rows: Optional[Callable[[int, int, int], bool]] = field(default=None, repr=False)

    def __call__(self, *args: Any) -> Any:
        if self.first_call is not None:
            return self.first_call(*args)
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"<Kernel {self.name} ({self.backend})>"


def node_framework(node: Node) -> str:
    """``"torch"`` / ``"tensorplay"``: whose eager semantics ``node``'s program follows."""
    from ..frameworks.graphs import graph_framework

    graph = getattr(node, "graph", None)
    return graph_framework(graph) if graph is not None else "torch"


def record_declines(backend: str, node: Node) -> Optional[str]:
    """The reason ``node``'s prim record gives for ``backend`` not to take it, or None.

    The record's ``declines[backend]`` check sees the canonical arguments with each
    tensor replaced by its ``TensorMeta``, the result's meta and the program's framework.
    """
    prim = node.meta.get("prim")
    if prim is None or backend not in prim.declines:
        return None
    def meta(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(meta(v) for v in value)
        return value.meta.get("tensor_meta") if isinstance(value, Node) else value
    args = {key: meta(value) for key, value in node.meta.get("prim_args", {}).items()}
    return prim.declined(backend, args, node.meta.get("tensor_meta"), node_framework(node))


@runtime_checkable
class Backend(Protocol):
    """What a backend provides. ``supports`` returns ``None`` or a reason string.

    Optional attributes read where present: ``devices`` (device types its
    kernels run on; ``explain`` plans for them), ``profitable_devices`` (where
    ``compile(backend="auto")`` picks it), ``configure(**options)`` (returns the
    backend configured with ``backend_options[name]`` from the pipeline),
    ``prepare(regions)`` (called by ``lower`` with all of its regions before the first
    ``compile``, e.g. to start builds side by side).
    """

    name: str

    def supports(self, node: Node) -> Optional[str]: ...

    def compile(self, region: Region) -> Kernel: ...


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
