"""``TileLangBackend``: GEMM + epilogue and pointwise regions, and ``tile_lang_op`` nodes.

>>> from tensorplay_graph.backends.tilelang import TileLangBackend
>>> TileLangBackend().name
'tilelang'

CUDA tensors: matmul / linear / bmm / addmm with the pointwise work after them
fused as an epilogue (see ``gemm``), other pointwise runs fused (``pointwise``). Each GEMM
group runs as this TileLang kernel or as the framework's matmul (cuBLAS) + a Triton epilogue,
per ``options["gemm"]`` and the measurements of ``..gemm_choice``.
CPU tensors (``backend="tilelang"`` only; ``"auto"`` leaves the CPU to eager, see
``profitable_devices``): pointwise only, through TileLang's C target: long chains
of cheap float32 ops (see ``CPU_*`` below and benchmarks/RESULTS.md). Transcendentals stay
eager on the CPU, whose vectorised exp/tanh beat the scalar libm calls of C.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from ...errors import LoweringError
from ..base import Kernel, Region, record_declines
from ..gemm_choice import CUBLAS, DEFAULT_POLICY, check_policy, tilelang_won
from . import exprs
from . import plan as planner
from .choice import bare_key, choice_for, prefetch
from .gemm import GEMM_DTYPES, EpInput, EpStep, GemmDesc, GemmKernel, heuristic_config, lower_cuda
from .pointwise import PointwiseDesc, PwInput, PwOutput, PwStep, compile_pointwise

log = logging.getLogger(__name__)

GPU_POINTWISE_DTYPES = ("float16", "bfloat16", "float32")
# Measured on this 2-core CPU (16M float32): scalar libm calls in the C kernel lose to
# TensorPlay's vectorised kernels (3-transcendental chain: 204 ms vs 142 ms tp.compile).
# Prims with one of these traits (their records say so) stay eager on the CPU.
CPU_SLOW_TRAITS = frozenset({"transcendental"})
CPU_MIN_CHAIN = 3        # a fused chain shorter than this saves too little traffic
CPU_MIN_NUMEL = 1 << 16  # below this, eager's per-op cost is launch overhead, not memory


def _is_tile_lang_op(node: Any) -> bool:
    return bool(getattr(node.target, "is_tile_lang_op", False))


def _epilogue_operands(node: Any) -> List[Tuple[Any, Optional[str]]]:
    """(operand, "col" | "full" | None) for each tensor the Gemm rule's epilogue reads."""
    rule, args = planner.gemm_rule(node.meta["prim"]), node.meta.get("prim_args") or {}
    out_shape = tuple(planner.tensor_meta(node).shape)
    return [(args[key], planner.epilogue_kind(args[key], out_shape))
            for key in rule.epilogue_operands if planner.is_node(args.get(key))]


class TileLangBackend:
    """The TileLang backend. ``device="cuda"`` plans CUDA kernels whatever the metas say
    (for lowering to CUDA source on a machine without a GPU)."""

    name = "tilelang"
    devices = ("cuda", "cpu")
    # Not the CPU: next to the framework's own thread pool, its OpenMP kernels lost to eager
    # (26 ms vs 1.7 ms on 2 cores at 256x512; still 0.46 vs 0.41 ms with one thread), so
    # "auto" never picks it there. backend="tilelang" still compiles CPU regions.
    profitable_devices = ("cuda",)

    def __init__(self, device: Optional[str] = None, autotune: bool = False,
                 gemm: str = DEFAULT_POLICY, timer: Any = None) -> None:
        self.device = device
        self.autotune = autotune
        self.gemm = check_policy(gemm)   # TileLang or cuBLAS per GEMM: see gemm_choice
        self.timer = timer               # measures candidates (default: CUDA events)

    def configure(self, device: Optional[str] = None, autotune: Optional[bool] = None,
                  gemm: Optional[str] = None, timer: Any = None) -> "TileLangBackend":
        """A copy with options (``compile(..., backend_options={"tilelang": {...}})``;
        ``gemm`` is also ``compile(..., options={"gemm": ...})``)."""
        return TileLangBackend(device if device is not None else self.device,
                               self.autotune if autotune is None else autotune,
                               self.gemm if gemm is None else gemm,
                               self.timer if timer is None else timer)

    # ------------------------------------------------------------------ support
    def supports(self, node: Any) -> Optional[str]:
        """None when this backend can take ``node``; otherwise why not."""
        if node.op == "call_function" and _is_tile_lang_op(node):
            return None
        prim = node.meta.get("prim")
        if prim is None:
            return "no prim (normalize found no canonical op) and not a tile_lang_op"
        meta = node.meta.get("tensor_meta")
        if not hasattr(meta, "shape"):
            return "no single tensor_meta (run shape_prop; multi-output ops are not lowered)"
        device = self.device or meta.device_type
        try:
            if prim.kind == "matmul":
                return self._supports_matmul(node, meta, device)
            if prim.kind == "pointwise":
                return self._supports_pointwise(node, prim, meta, device)
        except LoweringError as exc:  # an operand without tensor_meta (a symbolic scalar...)
            return f"an operand is not a tensor with known meta ({exc})"
        return f"prim {prim.name!r} is {prim.kind}; tilelang lowers matmul and pointwise prims"

    def _supports_matmul(self, node: Any, meta: Any, device: str) -> Optional[str]:
        if device != "cuda":
            return f"GEMM kernels need a CUDA (Hopper) device, tensor is on {device!r}"
        dtypes = {planner.tensor_meta(v).dtype for v in planner.tensor_args(node)}
        if not dtypes <= set(GEMM_DTYPES):
            return f"GEMM dtypes {sorted(dtypes)} unsupported; cast operands to bfloat16 or float16"
        dims, reason = planner.gemm_dims(node)
        if reason:
            return reason
        for operand, kind in _epilogue_operands(node):
            if kind is None:
                return (f"{node.meta['prim'].name}: epilogue operand {operand.name} of shape "
                        f"{planner.tensor_meta(operand).shape} is not (N,) or (M, N)")
        batch, M, N, K, trans_b = dims
        probe = GemmDesc(M, N, K, dtypes.pop(), meta.dtype, trans_b, batch)
        if heuristic_config(probe) is None:
            return f"GEMM {M}x{N}x{K} is not a multiple of 64x64x32 tiles"
        return None

    def _supports_pointwise(self, node: Any, prim: Any, meta: Any, device: str) -> Optional[str]:
        if "tilelang" not in prim.lowerings:
            return f"prim {prim.name!r} has no tilelang lowering template"
        bad_constant = exprs.unsupported_constant(node, device) or record_declines(self.name, node)
        if bad_constant:
            return bad_constant
        operands = planner.tensor_args(node)
        dtypes = {meta.dtype} | {planner.tensor_meta(v).dtype for v in operands}
        if device == "cuda":
            bad = dtypes - set(GPU_POINTWISE_DTYPES) - {"bool"}
            return f"dtypes {sorted(bad)} unsupported (floating only)" if bad else None
        if device != "cpu":
            return f"no TileLang target for device {device!r}"
        if not dtypes <= {"float32", "bool"}:  # bool: comparison results feeding where()
            return f"CPU kernels take float32 (and bool) only, got {sorted(dtypes)}"
        if prim.traits & CPU_SLOW_TRAITS:
            return (f"{prim.name} on CPU: TileLang's C target calls scalar libm, slower than "
                    f"TensorPlay eager (see benchmarks/RESULTS.md)")
        if meta.numel < CPU_MIN_NUMEL:
            return f"{meta.numel} elements < {CPU_MIN_NUMEL}: too small to gain from fusion on CPU"
        if self._cheap_chain(node, meta) < CPU_MIN_CHAIN:
            return f"CPU chain of cheap ops shorter than {CPU_MIN_CHAIN}; eager is as fast"
        return None

    def _cheap_chain(self, node: Any, meta: Any) -> int:
        """Size (capped) of the connected same-shape cheap float32 pointwise nodes around ``node``."""
        seen, todo = {node}, [node]
        while todo and len(seen) < CPU_MIN_CHAIN:
            n = todo.pop()
            for m in list(n.all_input_nodes) + list(n.users):
                prim, m_meta = m.meta.get("prim"), m.meta.get("tensor_meta")
                if (m not in seen and prim is not None and prim.kind == "pointwise"
                        and not prim.traits & CPU_SLOW_TRAITS and hasattr(m_meta, "shape")
                        and m_meta.shape == meta.shape and m_meta.dtype in ("float32", "bool")):
                    seen.add(m)
                    todo.append(m)
        return len(seen)

    def absorbs(self, producer: Any, node: Any) -> bool:
        """``node`` joins the GEMM epilogue ending at ``producer`` (see ``plan.absorbs``), where
        the GEMM may run as a TileLang kernel: under ``gemm="cublas"`` never, under ``"auto"``
        where a race stored for the GEMM was won by TileLang (``gemm_choice.tilelang_won``)."""
        if self.gemm == CUBLAS:
            return False
        if self.gemm == DEFAULT_POLICY and planner.prim_kind(producer) == "matmul":
            try:
                if not tilelang_won(bare_key(producer), self.timer):
                    return False
            except (LoweringError, ImportError):
                return False
        return planner.absorbs(self, producer, node)

    # ------------------------------------------------------------------ compile
    def compile(self, region: Region) -> Kernel:
        """One ``Kernel`` running the region's groups (GEMMs, pointwise runs, ops) in order."""
        if any(_is_tile_lang_op(n) for n in region.nodes):
            return self._compile_ops(region)
        device = self.device or planner.tensor_meta(region.nodes[0]).device_type
        names = planner.value_names(list(region.inputs) + list(region.nodes))
        steps = []
        for group in planner.plan(region):
            if not group.outputs:  # nothing reads it (dead code): no kernel to build or run
                continue
            if group.kind == "gemm":
                steps.append(self._gemm_step(group, names, region.id))
            else:
                steps.append(self._pointwise_step(group, names, "c" if device == "cpu" else "cuda"))
        return self._kernel(region, steps)

    def gemm_descs(self, region: Region) -> List[Tuple[GemmDesc, List[Any]]]:
        """(GemmDesc, operand nodes) for each GEMM group of ``region``."""
        names = planner.value_names(list(region.inputs) + list(region.nodes))
        return [self.gemm_desc(g, names) for g in planner.plan(region) if g.kind == "gemm"]

    def cuda_sources(self, region: Region, arch: str = "sm_90a") -> List[str]:
        """CUDA C++ of every GEMM in ``region`` for ``arch``; needs no GPU."""
        return [lower_cuda(d, heuristic_config(d), arch) for d, _ in self.gemm_descs(region)]

    def gemm_desc(self, group: planner.Group, names: Dict[Any, str]) -> Tuple[GemmDesc, List[Any]]:
        """(GemmDesc, operand nodes A, B, epilogue inputs) of one GEMM group."""
        mm = group.nodes[0]
        rule, args = planner.gemm_rule(mm.meta["prim"]), mm.meta.get("prim_args") or {}
        (batch, M, N, K, trans_b), _ = planner.gemm_dims(mm)
        a, b = args[rule.lhs], args[rule.rhs]
        ep_inputs: List[Tuple[Any, str]] = []
        for operand, kind in _epilogue_operands(mm):
            if kind is None:
                raise LoweringError(f"tilelang backend: {mm.name!r} epilogue operand of shape "
                                    f"{planner.tensor_meta(operand).shape} is not (N,) or (M, N)")
            ep_inputs.append((operand, kind))
        values = {k: f"{names[v]}_v" if planner.is_node(v) else v for k, v in args.items()}
        expr = rule.epilogue("acc_v", **values)
        ep_inputs += [e for e in group.ep_inputs if e[0] not in [x for x, _ in ep_inputs]]
        steps = [EpStep(names[mm], expr)] if (expr != "acc_v" or len(group.nodes) > 1) else []
        for node in group.nodes[1:]:
            steps.append(EpStep(names[node], node.meta["prim"].render(
                "tilelang", **planner.render_args(node, names))))
        dtype = planner.tensor_meta(a).dtype
        desc = GemmDesc(M, N, K, dtype, planner.tensor_meta(group.tail).dtype, trans_b, batch,
                        tuple(EpInput(names[n], k, planner.tensor_meta(n).dtype) for n, k in ep_inputs),
                        tuple(steps), names[group.tail] if steps else "acc",
                        tuple(n.format_node() for n in group.nodes))
        return desc, [a, b] + [n for n, _ in ep_inputs]

    def _gemm_step(self, group: planner.Group, names: Dict[Any, str], region_id: int):
        """The step of one GEMM group: the TileLang kernel or cuBLAS + a Triton epilogue,
        whichever :func:`.choice.choice_for` picks (nothing TileLang is compiled for cuBLAS's)."""
        desc, operands = self.gemm_desc(group, names)
        shape = tuple(planner.tensor_meta(group.tail).shape)
        choice, cublas, tilelang = choice_for(self, group, desc, region_id)
        if choice.winner == CUBLAS:
            kernel = cublas.kernel()
            return ("cublas", kernel, kernel.inputs, [group.tail], [shape], choice)
        kernel = tilelang.built or self.tilelang_kernel(desc).build_async()
        return ("gemm", kernel, operands, [group.tail], [shape], choice)

    def prepare(self, regions: List[Region]) -> None:
        """Called by ``lower`` before it compiles ``regions``: see :func:`.choice.prefetch`."""
        prefetch(self, regions)

    def tilelang_kernel(self, desc: GemmDesc) -> GemmKernel:
        """The (unbuilt) TileLang kernel for ``desc``: autotuned tiles if configured so."""
        cfg = None
        if self.autotune:
            from .autotune import tuned_config
            cfg = tuned_config(desc)
        return GemmKernel(desc, cfg)

    def _pointwise_step(self, group: planner.Group, names: Dict[Any, str], target: str):
        inside = set(group.nodes)
        inputs: List[Any] = []
        for n in group.nodes:
            for v in planner.tensor_args(n):
                if v not in inside and v not in inputs:
                    inputs.append(v)
        shape = tuple(planner.tensor_meta(group.tail).shape)
        kinds = {n: exprs.kind(n) for n in group.nodes}  # inputs are loaded as float32
        desc = PointwiseDesc(
            shape,
            tuple(PwInput(names[v], tuple(planner.tensor_meta(v).shape), planner.tensor_meta(v).dtype)
                  for v in inputs),
            tuple(self._pw_step(n, k, names, kinds, target) for k, n in enumerate(group.nodes)),
            tuple(PwOutput(names[o], planner.tensor_meta(o).dtype) for o in group.outputs),
            tuple(n.format_node() for n in group.nodes))
        kernel = compile_pointwise(desc, target)
        return ("pointwise", kernel, inputs, list(group.outputs), [shape] * len(group.outputs))

    @staticmethod
    def _pw_step(node: Any, k: int, names: Dict[Any, str], kinds: Dict[Any, str], target: str) -> PwStep:
        if target == "c":  # operands opaque to TIR's simplifier (see exprs.opaque_step)
            expr, operands = exprs.opaque_step(node, names, kinds, f"arg{k}")
            return PwStep(names[node], expr, exprs.kind(node), operands)
        return PwStep(names[node], exprs.step_expr(node, names, kinds, target), exprs.kind(node))

    def _kernel(self, region: Region, steps: list) -> Kernel:
        inputs, outputs = list(region.inputs), list(region.outputs)

        def run(*values: Any) -> tuple:
            env = dict(zip(inputs, values))
            for _, kernel, operands, produced, shapes, *_ in steps:
                results = kernel(*[env[v] for v in operands])
                for node, value, shape in zip(produced, results, shapes):
                    env[node] = value.reshape(shape) if tuple(value.shape) != shape else value
            return tuple(env[o] for o in outputs)

        source = "\n\n".join(k.source for _, k, *_ in steps)
        launch = {"kernels": [{"kind": kind, "key": k.key, **_launch_detail(kind, k)}
                              for kind, k, *_ in steps]}
        choices = [step[5].describe() for step in steps if len(step) > 5]
        if choices:
            launch["gemm"] = choices
        return Kernel(f"tilelang_region_{region.id}", self.name, run, source, launch)

    def _compile_ops(self, region: Region) -> Kernel:
        """``tile_lang_op`` nodes: call the op, which runs its registered TileLang kernel."""
        from ...ir.node import map_arg
        inputs, outputs, nodes = list(region.inputs), list(region.outputs), list(region.nodes)

        def run(*values: Any) -> tuple:
            env = dict(zip(inputs, values))
            for node in nodes:
                args = map_arg(node.args, lambda n: env[n])
                kwargs = map_arg(node.kwargs, lambda n: env[n])
                env[node] = node.target(*args, **kwargs)
            return tuple(env[o] for o in outputs)

        names = ", ".join(n.name for n in nodes)
        return Kernel(f"tilelang_ops_{region.id}", self.name, run,
                      f"# tile_lang_op nodes run their registered kernels: {names}\n", {"ops": names})


def _launch_detail(kind: str, kernel: Any) -> Dict[str, Any]:
    if kind == "gemm":
        return {"tiles": kernel.cfg.__dict__}
    if kind == "cublas":
        return {"call": kernel.call, "epilogue": kernel.epilogue_kernels}
    return {}


def make_backend() -> TileLangBackend:
    return TileLangBackend()
