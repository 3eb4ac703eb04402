"""``explain()``: what would be fused, by which backend, and why the rest was not.

>>> import torch, tensorplay_graph as tpg
>>> e = tpg.explain(lambda x: (x.exp() + 1).sum(1), torch.randn(4, 8), backend="reference")
>>> e.regions[0].nodes                                   # doctest: +SKIP
['exp', 'add', 'sum_']
>>> print(e)                                             # doctest: +SKIP
>>> e.render("plan.svg")                                 # doctest: +SKIP

Planning runs the passes up to ``partition``. A backend whose kernels run on
another device than the example inputs' (``backend.devices``, e.g. Triton's
``("cuda",)``) is planned for that device: every tensor is re-labelled as living
there first, so a CPU-only machine shows what Triton would claim on a GPU
(``assume_device`` forces a device; ``assume_device=False`` plans as given). Kernels are then
compiled for inspection (``compile_kernels=False`` skips that); a backend that
cannot be imported is reported, and planning goes on with the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

from .ir.meta import TensorMeta

__all__ = ["explain", "Explanation", "RegionInfo"]


@dataclass
class RegionInfo:
    """One planned region: ``id``, ``backend``, node names, and its inputs/outputs."""

    id: int
    backend: str
    nodes: List[str]
    inputs: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)


@dataclass
class Explanation:
    """The plan for one program; ``str()`` is a readable report, ``render()`` a drawing."""

    graph_module: Any
    backends: List[str]
    regions: List[RegionInfo] = field(default_factory=list)
    barriers: Dict[str, str] = field(default_factory=dict)        # node -> "code: reason"
    barrier_codes: Dict[str, str] = field(default_factory=dict)   # node -> code
    declined: Dict[str, Dict[str, str]] = field(default_factory=dict)  # node -> backend -> why
    kernels: Dict[int, Any] = field(default_factory=dict)         # region id -> Kernel
    kernel_errors: Dict[int, str] = field(default_factory=dict)   # region id -> error
    missing_backends: Dict[str, str] = field(default_factory=dict)
    eager: List[str] = field(default_factory=list)                # unclaimed, not barriers
    timings: Dict[str, float] = field(default_factory=dict)
    planned_device: Optional[str] = None  # set when tensors were re-labelled for planning
    layout: Optional[str] = None  # the channels_last pass's decision and why (conv nets)

    def region_of(self, node_name: str) -> Optional[RegionInfo]:
        return next((r for r in self.regions if node_name in r.nodes), None)

    def render(self, path: Optional[str] = None, format: str = "svg") -> Any:
        """A graphviz drawing: regions as clusters coloured by backend, barriers with reasons."""
        from .drawing import render

        return render(self.graph_module, path=path, format=format, name="explain")

    def _repr_svg_(self) -> Optional[str]:
        try:
            return self.render().pipe(format="svg").decode()
        except Exception:  # no dot binary: notebooks fall back to text
            return None

    def __str__(self) -> str:
        out = [f"tensorplay_graph plan -- backends in preference order: "
               f"{', '.join(self.backends) or '(none)'}; everything else runs eagerly"]
        if self.planned_device:
            out.append(f"  planned as if every tensor lived on {self.planned_device!r} "
                       f"(nothing was run there)")
        for name, why in self.missing_backends.items():
            out.append(f"  backend {name!r} is not available here, planned without it: {why}")
        if self.layout:
            out.append(f"  memory layout: {self.layout}")
        claimed = sum(len(r.nodes) for r in self.regions)
        out.append(f"{len(self.regions)} region(s) covering {claimed} node(s); "
                   f"{len(self.barriers)} barrier(s); {len(self.eager)} other eager node(s)")
        for region in self.regions:
            out.append(f"\nregion {region.id} [{region.backend}]: {', '.join(region.nodes)}")
            out.append(f"  reads {', '.join(region.inputs) or '-'}; "
                       f"writes {', '.join(region.outputs) or '-'}")
            kernel = self.kernels.get(region.id)
            if kernel is not None:
                lines = kernel.source.count("\n")
                out.append(f"  kernel {kernel.name} ({lines} lines of source in "
                           f".kernels[{region.id}].source)")
                out += [f"  {line}" for line in kernel.launch.get("gemm", ())]
            elif region.id in self.kernel_errors:
                out.append(f"  kernel not compiled, the region runs eagerly: "
                           f"{self.kernel_errors[region.id]}")
        if self.barriers:
            out.append("\nbarriers (never fused, run on their own):")
            out += [f"  {name}: {why}" for name, why in self.barriers.items()]
        if self.eager:
            out.append("\nunclaimed (run eagerly):")
            for name in self.eager:
                reasons = "; ".join(f"{b}: {w}" for b, w in self.declined.get(name, {}).items())
                out.append(f"  {name}" + (f" -- declined by {reasons}" if reasons else ""))
        return "\n".join(out)


def _relabel_device(gm, device: str) -> None:
    """Pretend every tensor lives on ``device`` (planning only; nothing runs afterwards)."""
    def move(meta):
        if isinstance(meta, TensorMeta):
            return meta.with_(device=device)
        if isinstance(meta, tuple):
            return tuple(move(m) for m in meta)
        return meta

    for node in gm.graph.nodes:
        if "tensor_meta" in node.meta:
            node.meta["tensor_meta"] = move(node.meta["tensor_meta"])


def _planning_device(assume_device, backends, example_inputs) -> Optional[str]:
    """The device to plan for: forced, or the first backend's when the inputs live elsewhere."""
    if assume_device is False:
        return None
    if assume_device not in (None, True):
        return str(assume_device)
    from .frameworks import device_type

    here = next((d for d in map(device_type, example_inputs) if d is not None), "cpu")
    for backend in backends:
        devices = getattr(backend, "devices", ())
        if devices and here not in devices:
            return devices[0]
        if devices:
            return None
    return None


def explain(fn: Any, *example_inputs: Any,
            backend: Union[str, Sequence[str], None] = None,
            assume_device: Union[str, bool, None] = None, compile_kernels: bool = True,
            debug_dir: Optional[str] = None, gemm: Optional[str] = None,
            layout: Optional[bool] = None) -> Explanation:
    """Plan ``fn`` on ``example_inputs`` and explain every decision.

    ``backend`` is a name or names in preference order (default: every built-in backend,
    in ``backends.registry.PREFERENCE`` order). ``fn`` may be a GraphModule. ``gemm`` is
    ``compile``'s ``options["gemm"]`` (default as there: ``"auto"`` for the default backends,
    ``"tilelang"`` for named ones); the compiled kernels say, per GEMM, which kernel was
    chosen and the timings behind it. ``layout`` is the ``channels_last`` option (None: decided
    for the planned device).
    """
    from .backends.registry import PREFERENCE, try_resolve_backends
    from .compiler import graph_module_of
    from .options import check_backend_names
    from .passes.manager import PassManager
    from .passes.partition import regions_from_meta
    from .passes.pipeline import PLANNING_PASSES, build_passes

    requested = PREFERENCE if backend is None else backend
    check_backend_names(requested)
    usable, missing = try_resolve_backends(requested)
    usable = _with_gemm_policy(usable, gemm, named=backend is not None)
    device = _planning_device(assume_device, usable, example_inputs)
    gm = graph_module_of(fn, example_inputs)
    # The compile pipeline's own planning passes; re-labelling the devices (when planning
    # for another device) goes right before the first pass that decides by device.
    passes = build_passes(tuple(example_inputs), usable, upto=PLANNING_PASSES[-1],
                          layout=layout)
    if device is not None:
        at = [name for name, _ in passes].index("decompose")
        passes.insert(at, ("assume_device", lambda g: _relabel_device(g, device)))
    manager = PassManager(passes, debug_dir=debug_dir)  # lints in debug / test mode
    gm = manager(gm)
    regions = regions_from_meta(gm)
    output = next((n for n in reversed(gm.graph.nodes) if n.op == "output"), None)

    report = Explanation(graph_module=gm, backends=[b.name for b in usable],
                         missing_backends=missing, timings=dict(manager.timings),
                         planned_device=device,
                         layout=None if output is None else output.meta.get("layout"))
    for region in regions:
        report.regions.append(RegionInfo(region.id, region.backend, region.names,
                                         [n.name for n in region.inputs],
                                         [n.name for n in region.outputs]))
    for node in gm.graph.nodes:
        barrier = node.meta.get("barrier")
        if node.meta.get("declined"):
            report.declined[node.name] = dict(node.meta["declined"])
        if barrier is not None:
            report.barriers[node.name] = str(barrier)
            report.barrier_codes[node.name] = barrier.code
        elif node.op in ("call_function", "call_method") and node.meta.get("region") is None:
            report.eager.append(node.name)
    if compile_kernels:
        _compile_kernels(report, regions, {b.name: b for b in usable})
    return report


def _with_gemm_policy(backends: List[Any], policy: Optional[str], named: bool) -> List[Any]:
    """``backends`` with the TileLang one configured for GEMM ``policy`` (compile's default)."""
    from .backends.gemm_choice import DEFAULT_POLICY, check_policy
    policy = check_policy(policy or ("tilelang" if named else DEFAULT_POLICY))
    return [b.configure(gemm=policy) if b.name == "tilelang" and hasattr(b, "configure") else b
            for b in backends]


def _compile_kernels(report: Explanation, regions, backends: Dict[str, Any]) -> None:
    for region in regions:
        try:
            kernel = backends[region.backend].compile(region)
        except Exception as exc:  # e.g. a toolchain that needs a GPU to build: say so
            report.kernel_errors[region.id] = f"{type(exc).__name__}: {exc}"
            continue
        report.kernels[region.id] = kernel
