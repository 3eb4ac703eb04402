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
from typing import Any, Callable, List, Optional

from ...errors import LoweringError
from ...frameworks import adapter_for
from ...prims.lowering import IndexMap, Reduction
from ...prims.rules import scalar_out_of_range
from ..base import Kernel, Region, record_declines
from .cache import KernelCache
from .codegen_rows import MAX_ROW
from .indexed_region import check_static, copies_in_eager
from .kernel_desc import TL_DTYPES
from .lowering import is_node, plan_region, row_dims
from . import prewarm
from .plan import PointwiseSpace, eager_fallback, interpreting


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


class TritonBackend:
    """Generated Triton kernels for fusible regions; registered kernels for ``triton_op`` nodes."""

    name = "triton"
    #: Where kernels run. CPU tensors are accepted only under ``TRITON_INTERPRET=1``
    #: (tests); ``explain`` plans CPU programs as if on CUDA.
    devices = ("cuda",)
    #: Where ``compile(backend="auto")`` picks this backend.
    profitable_devices = ("cuda",)
    #: Regions reading one value and writing one shape may become one kernel
    #: (``passes/siblings.py``): grouping puts pointwise work over one shape in one kernel.
    fuses_siblings = True

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
        if tm.device_type == "cuda":
            prewarm.start()
        for key, value in _tensor_args(node.meta.get("prim_args", {})):
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
        if prim.kind in ("view", "gather"):
            return self._index_verdict(node, prim, tm)
        if prim.kind not in ("pointwise", "reduction", "norm"):
            return f"{prim.kind} prims are not generated by the triton backend"
        rule = prim.lowering("triton")
        if rule is None:
            return f"prim {prim.name} has no 'triton' lowering in its record"
        why = record_declines(self.name, node)
        if why:
            return why
        if prim.kind == "pointwise":
            return scalar_out_of_range(node)
        if not (isinstance(rule, Reduction) or callable(rule)):
            return (f"{prim.kind} prim {prim.name}: its triton lowering must be a Reduction or a "
                    f"row builder, got {type(rule).__name__}")
        return _rows_verdict(node, prim)

    def _index_verdict(self, node: Any, prim: Any, tm: Any) -> Optional[str]:
        """View and gather prims: index arithmetic inside a kernel (``IndexMap`` lowerings)."""
        if not isinstance(prim.lowering("triton"), IndexMap):
            return f"{prim.kind} prim {prim.name} has no IndexMap 'triton' lowering in its record"
        for value in [node] + [v for _, v in _tensor_args(node.meta["prim_args"]) if is_node(v)]:
            why = check_static(value.meta["tensor_meta"].shape)
            if why:
                return why
        why = record_declines(self.name, node) or _index_rule_fails(node, prim, tm)
        if why or prim.kind == "gather" or copies_in_eager(node):
            return why
        # An alias costs nothing eagerly; it joins a kernel only to be read there (a user
        # that lands in another region after all reads a view step: indexed_region.py).
        if not _read_by_kernels(node):
            return ("a view read outside generated kernels runs eagerly (an alias of its "
                    "input: no copy)")
        if _input_alias_read_pointwise(node):
            # A pointwise kernel reads an input's view by its strides already; claiming it
            # would turn the region into an indexed kernel (per-element index arithmetic) and
            # lose the tiled kernel's once-per-tile loads of broadcast operands (batch-norm's
            # (C, 1, 1) parameter views).
            return ("a view of a program input read only by pointwise kernels runs eagerly (an "
                    "alias: the kernel reads it by its strides)")
        return None

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
        # Pointwise and indexed kernels write eager's strides themselves (lower adds no copy
        # after them).
        pointwise = {n for s in steps if _writes_eager_strides(s.plan) for n in s.outputs}
        strides = {"eager_strides": tuple(n in pointwise for n in region.outputs)}

        pad_rows = _row_padding(plan, result_slots)
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
                          {"kernels": [single.desc.name], "compile_s": time.perf_counter() - start,
                           **strides}, pad_rows=pad_rows)

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
                  "compile_s": time.perf_counter() - start, **strides}
        return Kernel(f"triton_region_{region.id}", self.name, guard(run), "\n\n".join(sources),
                      launch, pad_rows=pad_rows)


def _row_padding(plan: list, result_slots: List[int]) -> Callable[[int, int, int], bool]:
    """``Kernel.pad_rows`` of a region: the plan writing a result pads it, when no later
    kernel of the region reads that result (it would then read it strided)."""
    def pad_rows(position: int, width: int, pitch: int) -> bool:
        slot = result_slots[position]
        for at, (kernel_plan, _ins, outs) in enumerate(plan):
            if slot in outs:
                if any(slot in ins for _p, ins, _o in plan[at + 1:]):
                    return False
                hook = getattr(kernel_plan, "pad_rows", None)
                return bool(hook is not None and hook(outs.index(slot), width, pitch))
        return False
    return pad_rows


#: A reduction over strided rows shorter than this, with at least this many rows per row
#: element, is left to eager (``_rows_verdict``).
SHORT_ROW = 128
MANY_ROWS_PER_ELEMENT = 16


def _read_by_kernels(view: Any) -> bool:
    """Whether every reader of ``view`` is a call this backend generates code for (by its
    record's kind): a computation, a gather, a copying view, or an alias view whose own
    readers are (views have one tensor operand, so this walks a tree once)."""
    if not view.users:
        return False
    for user in view.users:
        prim = user.meta.get("prim") if user.op in ("call_function", "call_method") else None
        rule = prim.lowering("triton") if prim is not None else None
        if rule is None or user.meta.get("barrier") is not None:
            return False
        if prim.kind in ("pointwise", "reduction", "norm", "gather"):
            continue
        if not isinstance(rule, IndexMap) or \
                not (copies_in_eager(user) or _read_by_kernels(user)):
            return False
    return True


def _input_alias_read_pointwise(view: Any) -> bool:
    """Whether ``view`` only adds or drops size-1 dims of a program input (placeholder /
    attribute: batch-norm's ``(C, 1, 1)`` parameters) and every reader is a pointwise call."""
    operands = [v for _, v in _tensor_args(view.meta["prim_args"]) if is_node(v)]
    if len(operands) != 1 or operands[0].op not in ("placeholder", "get_attr"):
        return False
    squeezed = [n for n in view.meta["tensor_meta"].shape if n != 1]
    if squeezed != [n for n in operands[0].meta["tensor_meta"].shape if n != 1]:
        return False  # only size-1 dims added or dropped: a broadcast operand's reshape
    for user in view.users:
        prim = user.meta.get("prim") if user.op in ("call_function", "call_method") else None
        if prim is None or prim.kind != "pointwise":
            return False
    return True


def _writes_eager_strides(plan: Any) -> bool:
    """Whether ``plan``'s kernel lays its outputs out with eager's strides (an indexed plan
    says so itself; a rows / column kernel writes row-major)."""
    explicit = getattr(plan, "writes_eager_strides", None)
    if explicit is not None:
        return bool(explicit)
    return isinstance(getattr(plan, "space", None), PointwiseSpace)


def _tensor_args(args: dict):
    """(name, value) of every argument, list items (``cat``'s tensors) one by one."""
    for key, value in args.items():
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield f"{key}[{i}]", item
        else:
            yield key, value


def _index_rule_fails(node: Any, prim: Any, tm: Any) -> Optional[str]:
    """The reason the record's index rule cannot map ``node`` (what codegen_indexed would
    raise), else None. torch's cat skips 1-d empty tensors whatever ``dim`` says
    (cat([x0, x0], dim=1) of shape (0,), seed 6000745); the rule rejects that dim."""
    from .codegen_indexed import _metas
    args = {k: _metas(v) for k, v in node.meta["prim_args"].items()}
    coords = [f"x{d}" for d in range(len(tm.shape))]
    try:
        prim.lowering("triton").rule(coords, tuple(tm.shape), **args)
    except Exception as exc:  # noqa: BLE001 - any rule failure is a decline, named
        return f"{prim.name}: its index rule does not map this call ({type(exc).__name__}: {exc})"
    return None


def _rows_verdict(node: Any, prim: Any) -> Optional[str]:
    """Whether a reduction / norm node's rows fit one kernel (rows or column kernel)."""
    a = node.meta["prim_args"].get("a")
    if not is_node(a):
        return "reduced operand is not a tensor node"
    shape, stride = tuple(a.meta["tensor_meta"].shape), tuple(a.meta["tensor_meta"].stride)
    try:
        dims = [d for d in row_dims(node, shape) if shape[d] != 1]
    except ValueError as exc:  # a record without a dims rule
        return str(exc)
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
    if n > MAX_ROW and node.meta["tensor_meta"].dtype == "bool":
        # Longer rows loop (codegen_columns), which accumulates in the compute dtype; a
        # reduction to bool has none there.
        return f"{prim.name} to bool over rows of {n} elements (a rows kernel holds {MAX_ROW})"
    rows = 1
    for d, size in enumerate(shape):
        rows *= 1 if d in dims else size
    if dims and stride[dims[-1]] != 1 and n < SHORT_ROW and rows >= MANY_ROWS_PER_ELEMENT * n:
        # Global pooling of an NHWC tensor: one program per (n, c) row would read its H*W
        # elements C apart (one element per memory sector); eager's reduction reads them
        # coalesced across the channels.
        return (f"{rows} short rows of {n} elements {stride[dims[-1]]} apart in memory: eager's "
                "reduction reads them coalesced across rows, a rows kernel one element per sector")
    return None


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
        if not hasattr(step.plan, "render"):
            continue  # an eager view step: no source
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
