"""``TritonBackend``: claims pointwise / reduction / row-norm nodes and ``triton_op`` calls.

>>> from tensorplay_graph.backends import get_backend     # doctest: +SKIP
>>> kernel = get_backend("triton").compile(region)        # doctest: +SKIP
>>> print(kernel.source)                                  # doctest: +SKIP

Kernels run on torch CUDA tensors; on CPU only under ``TRITON_INTERPRET=1``
(set before Python starts). TensorPlay tensors cross to torch via DLPack and
results go back the same way.
"""

from __future__ import annotations

import time
from typing import Any, List, Optional

from ...errors import LoweringError
from ...frameworks import adapter_for
from ...prims.rules import scalar_out_of_range
from ..base import Kernel, Region
from .cache import KernelCache
from .codegen_reduction import REDUCTION_PRIMS
from .codegen_rows import MAX_ROW, NORM_PRIMS
from .kernel_desc import TL_DTYPES
from .lowering import is_node, plan_region, row_dims
from .plan import eager_fallback, interpreting


_TENSORPLAY = adapter_for("tensorplay")


def _custom_op(target: Any) -> Optional[Any]:
    return target if all(hasattr(target, a) for a in ("is_triton_op", "kernel_for")) else None


def _to_torch(values, foreign: List[bool]) -> list:
    """DLPack crossing for TensorPlay tensors (zero-copy); marks which were foreign."""
    if not _TENSORPLAY.loaded():  # no TensorPlay tensor can exist: nothing to convert
        return list(values)
    torch = adapter_for("torch")
    out = []
    for v in values:
        is_tp = type(v).__module__.startswith("tensorplay") and hasattr(v, "__dlpack__")
        foreign.append(is_tp)
        out.append(torch.from_dlpack(v) if is_tp else v)
    return out


def _from_torch(values):
    return tuple(_TENSORPLAY.from_dlpack(v) for v in values)


def _pointwise_semantics(prim: str, args: dict, dtype: str) -> Optional[str]:
    """Why eager's result for this pointwise node cannot be matched by its template, or None."""
    if prim == "div" and args.get("rounding_mode") == "floor":
        # eager: (a - fmod(a, b)) / b rounded; floor(a / b) differs (1.0 // 0.1 is 9, not 10)
        return "div(rounding_mode='floor') is not floor(a / b) in eager"
    if prim == "pow":
        if dtype not in ("float32", "float16", "bfloat16", "float64"):
            return f"integer pow ({dtype}) must be exact; the template computes through exp2/log2"
        b = args.get("b")
        if dtype == "float16" and not is_node(b) and b in (0.5, -0.5):
            # torch takes sqrt for x ** 0.5 in float32 but C pow in float16: pow(-inf, .5) differs
            return "float16 x ** +-0.5: eager's special values differ from sqrt's"
    return None


def _cpu_eager_quirk(node: Any, prim: str, tm: Any) -> Optional[str]:
    """Why CPU eager (the reference under ``TRITON_INTERPRET=1``) differs from the CUDA
    semantics the templates follow, or None."""
    if prim == "gelu" and tm.device_type == "cpu" and tm.dtype in ("float32", "bfloat16") and \
            node.meta["prim_args"].get("approximate", "none") == "none":
        from ...frameworks.graphs import graph_framework

        graph = getattr(node, "graph", None)
        if graph is None or graph_framework(graph) == "torch":
            # torch's vectorised CPU kernel gives nan at +inf (inf on CUDA, in its scalar
            # path and in float16), so no template matches it for every layout and size.
            return ("torch's float32 / bfloat16 CPU gelu gives NaN at +inf in its vectorised "
                    "path only; the kernel follows CUDA eager (use CUDA tensors, or "
                    "approximate='tanh')")
    return None


class TritonBackend:
    """Generated Triton kernels for fusible regions; registered kernels for ``triton_op`` nodes."""

    name = "triton"
    #: Where kernels run. CPU tensors are accepted only under ``TRITON_INTERPRET=1``
    #: (tests); ``explain`` plans CPU programs as if on CUDA.
    devices = ("cuda",)
    #: Where ``compile(backend="auto")`` picks this backend.
    profitable_devices = ("cuda",)

    def __init__(self, cache_dir: Optional[str] = None) -> None:
        self.cache = KernelCache(cache_dir) if cache_dir else None

    def configure(self, cache_dir: Optional[str] = None) -> "TritonBackend":
        """A copy with options (``backend_options={"triton": {"cache_dir": ...}}``).

        CUDA-graph replay is a whole-program option: ``options={"cuda_graphs": True}``.
        """
        return TritonBackend(cache_dir) if cache_dir else self

    # ------------------------------------------------------------------ support
    def supports(self, node: Any) -> Optional[str]:
        """``None`` if this backend can run ``node``, else the reason it cannot."""
        op = _custom_op(node.target) if node.op == "call_function" else None
        if op is not None:
            return None if op.is_triton_op else "custom ops other than triton_op run eagerly"
        prim = node.meta.get("prim")
        if prim is None:
            return "no prim for this op"
        tm = node.meta.get("tensor_meta")
        if tm is None or isinstance(tm, (tuple, list)):
            return "needs a single tensor_meta (run shape_prop)"
        if tm.dtype not in TL_DTYPES:
            return f"dtype {tm.dtype} has no Triton type"
        if tm.device_type != "cuda" and not interpreting():
            return (f"tensor on {tm.device}: Triton kernels run on CUDA tensors "
                    "(on CPU only with TRITON_INTERPRET=1 set before Python starts)")
        for key, value in node.meta.get("prim_args", {}).items():
            if is_node(value):
                vm = value.meta.get("tensor_meta")
                if vm is None or isinstance(vm, (tuple, list)):
                    return f"operand {key}={value.name} is not a single tensor"
                if vm.dtype not in TL_DTYPES:
                    return f"operand {key}={value.name} has dtype {vm.dtype}, no Triton type"
                # Device types only: metas spell one device "cpu" or "cpu:0"; the launch
                # guard (plan.operand_mover) compares exact devices.
                if vm.device_type != tm.device_type and (vm.ndim or vm.device_type != "cpu"):
                    return (f"operand {key}={value.name} is on {vm.device}, the result on "
                            f"{tm.device}: a kernel reads one device (a 0-d CPU tensor, read "
                            f"as a scalar, is the exception)")
            elif isinstance(value, complex):
                return f"argument {key} is complex"
        if prim.kind == "pointwise":
            if prim.lowering("triton") is None:
                return f"prim {prim.name} has no triton template"
            why = _pointwise_semantics(prim.name, node.meta.get("prim_args", {}), tm.dtype) \
                or _cpu_eager_quirk(node, prim.name, tm)
            if why:
                return why
            return scalar_out_of_range(node)
        if prim.kind == "reduction" and prim.name not in REDUCTION_PRIMS:
            return f"reduction {prim.name} has no Triton lowering ({', '.join(REDUCTION_PRIMS)} do)"
        if prim.kind == "norm" and prim.name not in NORM_PRIMS:
            return f"row pattern {prim.name} has no Triton lowering"
        if prim.kind in ("reduction", "norm"):
            a = node.meta["prim_args"].get("a")
            if not is_node(a):
                return "reduced operand is not a tensor node"
            shape, stride = tuple(a.meta["tensor_meta"].shape), tuple(a.meta["tensor_meta"].stride)
            dims = [d for d in row_dims(node, shape) if shape[d] != 1]
            if any(stride[x] != stride[y] * shape[y] for x, y in zip(dims, dims[1:])):
                return (f"reduced dims {tuple(dims)} of {a.name} are not one contiguous run in memory, "
                        "so they cannot form the row of one kernel")
            n = 1
            for d in dims:
                n *= shape[d]
            if n == 0 or 0 in shape:
                # Empty rows: eager returns the identity (sum 0, mean nan) or raises (amax);
                # a rows kernel over no elements would launch no program for it.
                return f"{prim.name} over an empty tensor {shape} runs eagerly (identity or error)"
            if n > MAX_ROW:
                return f"rows of {n} elements exceed the {MAX_ROW} a rows kernel keeps in registers"
            return None
        return f"{prim.kind} prims are not generated by the triton backend"

    # ------------------------------------------------------------------ compile
    def compile(self, region: Region) -> Kernel:
        """One ``Kernel`` running every kernel of ``region`` in order."""
        start = time.perf_counter()
        if len(region.nodes) == 1 and _custom_op(region.nodes[0].target) is not None:
            return compile_triton_op(region)
        from .cache import default_cache
        try:
            steps = plan_region(region, cache=self.cache or default_cache())
        except LoweringError:
            raise
        except Exception as exc:
            raise LoweringError(f"triton backend: region {region.id} ({', '.join(region.names)}) "
                                f"could not be lowered: {type(exc).__name__}: {exc}") from exc
        slots = {node: i for i, node in enumerate(region.inputs) if is_node(node)}
        width = len(region.inputs)
        for step in steps:
            for node in step.outputs:
                slots[node] = width
                width += 1
        plan = [(s.plan, [slots[n] for n in s.inputs], [slots[n] for n in s.outputs]) for s in steps]
        guard = _eager_guard(region)
        result_slots = [slots[n] for n in region.outputs]
        sources = _render_examples(steps)

        if len(plan) == 1 and plan[0][1] == list(range(len(region.inputs))) and \
                plan[0][2] == result_slots == list(range(len(region.inputs), width)):
            single = plan[0][0]

            def run(*values):  # the common case: one kernel over the region's inputs
                if _TENSORPLAY.loaded():
                    foreign: List[bool] = []
                    outs = tuple(single(*_to_torch(values, foreign)))
                    return _from_torch(outs) if any(foreign) else outs
                return tuple(single(*values))
            return Kernel(f"triton_region_{region.id}", self.name, guard(run), "\n\n".join(sources),
                          {"kernels": [single.desc.name], "compile_s": time.perf_counter() - start})

        def run(*values):
            foreign: List[bool] = []
            env = _to_torch(values, foreign) + [None] * (width - len(values))
            for kernel_plan, ins, outs in plan:
                results = kernel_plan(*[env[i] for i in ins])
                for i, value in zip(outs, results):
                    env[i] = value
            out = tuple(env[i] for i in result_slots)
            return _from_torch(out) if any(foreign) else out

        launch = {"kernels": [s.plan.desc.name for s in steps],
                  "compile_s": time.perf_counter() - start}
        return Kernel(f"triton_region_{region.id}", self.name, guard(run), "\n\n".join(sources),
                      launch)


def _eager_guard(region: Region):
    """Wraps a region's run so operands no kernel may read run the region eagerly."""
    from ...ir import GraphModule
    from ..base import region_subgraph
    eager = GraphModule({}, region_subgraph(region))
    return lambda run: eager_fallback(run, eager, f"triton region {region.id} "
                                                  f"({', '.join(region.names)})")


def _render_examples(steps) -> List[str]:
    """Render (and import, so Triton sees a file) each kernel for its example layout."""
    sources = []
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), tuple(n.meta["tensor_meta"].stride))
                 for n in step.inputs]
        source = step.plan.render(step.plan.layout_for(metas))
        step.plan.cache.jit_function(source.name, source.text)
        sources.append(source.text)
    return sources


def compile_triton_op(region: Region) -> Kernel:
    """A ``Kernel`` for a single ``triton_op`` node: its registered kernel, called directly.

    The kernel launches through ``wrap_triton``; calling it directly skips the
    op's dispatch (one device scan + dict hit) on every call.
    """
    from ..base import Kernel as _Kernel
    node = region.nodes[0]
    op = node.target
    index = {n: i for i, n in enumerate(region.inputs)}
    cache = {}

    def substitute(value, values):
        if is_node(value):
            return values[index[value]]
        if isinstance(value, (list, tuple)):
            return type(value)(substitute(v, values) for v in value)
        return value

    def run(*values):
        foreign: List[bool] = []
        values = _to_torch(values, foreign)
        device = next((v.device.type for v in values if hasattr(v, "device")), "cuda")
        fn = cache.get(device)
        if fn is None:
            fn = cache[device] = op.kernel_for(device)
        args = substitute(tuple(node.args), values)
        kwargs = {k: substitute(v, values) for k, v in node.kwargs.items()}
        out = fn(*args, **kwargs)
        out = out if isinstance(out, tuple) else (out,)
        return _from_torch(out) if any(foreign) else out

    return _Kernel(f"triton_op_{node.name}", "triton", run, f"# triton_op {op!r}: registered kernel",
                   {"kernels": [repr(op)]})
