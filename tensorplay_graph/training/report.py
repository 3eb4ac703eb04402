"""What a training compile did: its forward / backward runners and their fused regions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple


@dataclass
class LoweredRegion:
    """One fused region of a lowered graph: its kernel's backend and the source nodes."""

    backend: str
    kernel: str
    nodes: List[str]


@dataclass
class TrainingProgram:
    """One Dynamo graph compiled for training.

    ``runners`` maps ``"forward"`` / ``"backward"`` (AOTAutograd path) or ``"eager"``
    (eager-autograd path, ``eager_reason`` says why) to its ``GraphRunner``;
    ``graphs`` the imported graphs; ``bridged`` the custom ops kept opaque.
    """

    name: str
    runners: Dict[str, Any] = field(default_factory=dict)
    graphs: Dict[str, Any] = field(default_factory=dict)
    bridged: List[str] = field(default_factory=list)
    eager_reason: Optional[str] = None
    #: Who built the backward graph: AOTAutograd (torch.compile) or our own joint graph.
    compiled_by: str = "AOTAutograd"
    #: The forward values the backward receives (our joint graph's min-cut), and their size.
    saved: List[str] = field(default_factory=list)
    saved_bytes: int = 0
    #: Forward values the backward recomputes instead of saving.
    recomputed: List[str] = field(default_factory=list)
    #: ``(name, bytes, "shape dtype")`` of the saved tensors, largest first
    saved_sizes: List[Tuple[str, int, str]] = field(default_factory=list)

    def attach(self, kind: str, runner: Any, graph: Any) -> None:
        self.runners[kind] = runner
        self.graphs[kind] = graph

    def regions(self, kind: str) -> List[LoweredRegion]:
        """Fused regions of the ``kind`` graph as lowered (empty until its first call)."""
        runner = self.runners.get(kind)
        lowered = getattr(runner, "lowered", None)
        found = []
        for module in _lowered_modules(lowered):
            for node in module.graph.nodes:
                kernel = node.meta.get("kernel")
                subgraph = node.meta.get("subgraph")
                if kernel is None or subgraph is None:
                    continue
                names = [record[0] for record in subgraph.records]
                found.append(LoweredRegion(kernel.backend, kernel.name, names))
        return found

    def barriers(self, kind: str) -> Dict[str, str]:
        """``{node: reason}`` of the ``kind`` graph's barrier nodes (after lowering)."""
        found = {}
        for module in _lowered_modules(getattr(self.runners.get(kind), "lowered", None)):
            for node in module.graph.nodes:
                if node.meta.get("barrier") is not None:
                    found[node.name] = str(node.meta["barrier"])
        return found

    def explain(self) -> str:
        if self.eager_reason is not None:
            return (f"{self.name}: runs through eager autograd (no lowered kernels): "
                    f"{self.eager_reason}")
        lines = [f"{self.name}: forward and backward compiled through {self.compiled_by}"]
        if self.bridged:
            lines.append(f"  opaque custom ops / ops with their own backward: {', '.join(self.bridged)}")
        if self.saved or self.recomputed:
            lines.append(f"  saved for backward: {len(self.saved)} value(s), "
                         f"{self.saved_bytes} bytes; recomputed in backward: "
                         f"{', '.join(self.recomputed) or 'nothing'}")
        if self.saved_sizes:
            largest = self.saved_sizes[:8]
            lines.append("  largest saved: " + ", ".join(
                f"{name} ({what}, {size / 2**20:.1f} MiB)" for name, size, what in largest))
        for kind in ("forward", "backward"):
            if kind not in self.runners:
                lines.append(f"  {kind}: not compiled yet")
                continue
            regions = self.regions(kind)
            if getattr(self.runners[kind], "lowered", None) is None:
                lines.append(f"  {kind}: not lowered (no backend chosen, or not run yet)")
            lines.append(f"  {kind}: {len(regions)} fused region(s)")
            graphs = getattr(getattr(self.runners[kind], "lowered", None), "cuda_graphs", None)
            if isinstance(graphs, str):
                lines.append(f"    cuda graphs {graphs}")
            lines += [f"    [{r.backend}] {r.kernel}: {', '.join(r.nodes)}" for r in regions]
            lines += [f"    barrier {n}: {why}" for n, why in self.barriers(kind).items()]
        return "\n".join(lines)

    __str__ = explain


def _lowered_modules(lowered: Any) -> List[Any]:
    """The lowered GraphModule(s) behind a runner's ``lowered`` (one per shape if symbolic)."""
    if lowered is None:
        return []
    if hasattr(lowered, "graph"):
        return [lowered]
    cache = getattr(lowered, "_cache", None) or getattr(lowered, "programs", None)
    if isinstance(cache, dict):
        return [m for m in cache.values() if hasattr(m, "graph")]
    return []
