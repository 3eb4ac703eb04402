"""Fused pointwise kernels: a small description -> a TileLang program -> a callable.

A :class:`PointwiseDesc` lists broadcastable inputs, let-bound steps (TileLang
expressions over earlier names, computed in float32) and outputs. The program
walks the output's flat index space in blocks: on CUDA one thread block per
``BLOCK`` elements (``T.Parallel``), on the CPU ``"c"`` target a serial loop per
block whose outer loop is parallelised with OpenMP.

CPU builds: TileLang 0.1.15 builds ``target="c"`` kernels at ``-O0`` (its
export path passes no flags on Linux), which made a fused 8-op chain slower
than TensorPlay eager. So for ``"c"`` we take TileLang's lowered C source
(``tilelang.lower``) and build it ourselves with ``-O3 -march=native -fopenmp`` (see
``cbuild``: as plain C when it is plain C, a fifth of the build time).
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ...errors import LoweringError
from . import cache, cbuild
from .program import contiguous, empty, header, numel

GPU_BLOCK, GPU_THREADS = 1024, 256
CPU_BLOCK = 4096


@dataclass(frozen=True)
class PwInput:
    name: str
    shape: Tuple[int, ...]  # broadcastable to the output shape
    dtype: str


@dataclass(frozen=True)
class PwStep:
    name: str
    expr: str  # TileLang expression over ``{input/step name}_v`` and the operands' variables
    dtype: str = "float32"  # "float32" or "bool"
    # (variable, source, is_constant): ``variable`` holds the value of input / step ``source``
    # or the float32 constant ``source`` (C target; see exprs.opaque_step)
    operands: Tuple[Tuple[str, str, bool], ...] = ()


@dataclass(frozen=True)
class PwOutput:
    name: str  # an input or step name
    dtype: str


@dataclass(frozen=True)
class PointwiseDesc:
    """A fused pointwise region: everything the generator needs, nothing from the IR."""

    shape: Tuple[int, ...]
    inputs: Tuple[PwInput, ...]
    steps: Tuple[PwStep, ...]
    outputs: Tuple[PwOutput, ...]
    sources: Tuple[str, ...] = ()


def _index_expr(in_shape: Tuple[int, ...], out_shape: Tuple[int, ...]) -> str:
    """Flat index into a (broadcast) input from the output's flat index ``idx``."""
    if tuple(in_shape) == tuple(out_shape):
        return "idx"
    if numel(in_shape) == 1:
        return "0"
    padded = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
    terms, in_stride, out_stride = [], 1, 1
    for d in range(len(out_shape) - 1, -1, -1):
        if padded[d] != 1:
            coord = "idx" if out_stride == 1 else f"(idx // {out_stride})"
            if d > 0:
                coord = f"({coord} % {out_shape[d]})"
            terms.append(coord if in_stride == 1 else f"{coord} * {in_stride}")
            in_stride *= padded[d]
        out_stride *= out_shape[d]
    return " + ".join(reversed(terms))


def render(desc: PointwiseDesc, target: str) -> str:
    """The TileLang program text for ``desc`` on ``target`` (``"cuda"`` or ``"c"``)."""
    total = numel(desc.shape)
    gpu = target != "c"
    block = min(GPU_BLOCK if gpu else CPU_BLOCK, max(total, 1))
    params = [f'{p.name}: T.Tensor(({numel(p.shape)},), "{p.dtype}")' for p in desc.inputs]
    params += [f'out{k}: T.Tensor((numel,), "{o.dtype}")' for k, o in enumerate(desc.outputs)]
    lines = [header("pointwise", desc.sources),
             "import tilelang.language as T", "",
             f"numel = {total}", f"BLOCK = {block}", "", "",
             "@T.prim_func", f"def main({', '.join(params)}):"]
    if gpu:
        lines += [f"    with T.Kernel(T.ceildiv(numel, BLOCK), threads={GPU_THREADS}) as bx:",
                  "        for i in T.Parallel(BLOCK):"]
    else:
        lines += ["    with T.Kernel(T.ceildiv(numel, BLOCK), threads=1) as bx:",
                  "        for i in T.serial(BLOCK):"]
    if gpu:
        body = ["idx = bx * BLOCK + i"]
        body += [f'{p.name}_v = T.Cast("float32", {p.name}[{_index_expr(p.shape, desc.shape)}])'
                 for p in desc.inputs]
        body += [f"{s.name}_v = {s.expr}" for s in desc.steps]
    else:
        allocs, body = _c_body(desc)
        lines[-1:-1] = allocs  # inside the kernel, before the loop
    for k, o in enumerate(desc.outputs):
        body.append(f'out{k}[idx] = T.Cast("{o.dtype}", {o.name}_v)')
    indent = "            "
    if total % block:
        lines.append(indent + body[0])
        lines.append(indent + "if idx < numel:")
        body, indent = body[1:], indent + "    "
    lines += [indent + b for b in body]
    return "\n".join(lines) + "\n"


def _c_body(desc: PointwiseDesc) -> Tuple[List[str], List[str]]:
    """(lines before the loop, loop body) of the C target: every value in a local buffer slot.

    TVM's simplifier rewrites floats like integers wherever it sees through a value:
    ``(y * 3e38 + 3e38) - 3e38`` becomes ``y * 3e38`` and ``0.0 * x`` becomes 0 (eager: inf,
    NaN). Inputs, steps and constants are stored to slots and each step reads its operands
    through variables bound to loads, one per operand, which the simplifier cannot look into.
    """
    slots: Dict[str, str] = {}
    counts = {"sf": 0, "sb": 0, "sc": 0}

    def slot(buffer: str) -> str:
        counts[buffer] += 1
        return f"{buffer}[{counts[buffer] - 1}]"

    consts: Dict[str, str] = {}
    body = ["idx = bx * BLOCK + i"]
    for p in desc.inputs:
        slots[p.name] = slot("sf")
        body += [f'{slots[p.name]} = T.Cast("float32", {p.name}[{_index_expr(p.shape, desc.shape)}])',
                 f"{p.name}_v = {slots[p.name]}"]
    for s in desc.steps:
        for var, source, constant in s.operands:
            if constant and source not in consts:
                consts[source] = slot("sc")
            body.append(f"{var} = {consts[source] if constant else slots[source]}")
        slots[s.name] = slot("sb" if s.dtype == "bool" else "sf")
        body += [f"{slots[s.name]} = {s.expr}", f"{s.name}_v = {slots[s.name]}"]
    dtypes = {"sf": "float32", "sb": "bool", "sc": "float32"}
    allocs = [f'        {b} = T.alloc_local(({n},), "{dtypes[b]}")' for b, n in counts.items() if n]
    allocs += [f"        {where} = {text}" for text, where in consts.items()]
    return allocs, body


def _parallelise(c_source: str) -> Tuple[str, int]:
    """Put ``#pragma omp parallel for`` on the loop over blocks (ours, see render: its
    iterations are independent), with the slot buffers private: TileLang's C codegen declares
    them once at the top of the function, where OpenMP threads would share them (a data race)."""
    head = re.search(r"\n(\s*)for \(int32_t bx = ", c_source)
    if head is None:
        return c_source, 0
    buffers = re.findall(r"^\s*(?:float|int8_t|bool)\s+(s[fbc])\[\d+\];", c_source[:head.start()], re.M)
    private = f" private({', '.join(buffers)})" if buffers else ""
    return (c_source[:head.start()] + f"\n{head.group(1)}#pragma omp parallel for{private}"
            + c_source[head.start():], 1)


def value_name(name: str) -> str:
    """How a step expression refers to input/step ``name`` inside the loop body."""
    return f"{name}_v"


class PointwiseKernel:
    """Callable ``kernel(*inputs) -> tuple(outputs)`` for one :class:`PointwiseDesc`."""

    def __init__(self, desc: PointwiseDesc, target: str) -> None:
        self.desc, self.target = desc, target
        self.source = render(desc, target)
        self.key = cache.digest(self.source, desc.shape, [i.dtype for i in desc.inputs],
                                cache.tilelang_version(), target)
        self._fn: Optional[Callable[..., Any]] = None
        self.c_source = ""
        self._order: List[int] = []
        names = [p.name for p in desc.inputs] + [f"out{k}" for k in range(len(desc.outputs))]
        if len(set(names)) != len(names):
            raise LoweringError(f"tilelang backend: pointwise parameter names collide: {names}")

    def build(self) -> "PointwiseKernel":
        if self._fn is None:
            self._fn = self._build_c() if self.target == "c" else self._build_cuda()
        return self

    def _build_cuda(self) -> Callable[..., Any]:
        tilelang = cache.load_tilelang()
        program = cache.load_program(self.source, self.key).main
        n_in = len(self.desc.inputs)
        out_idx = list(range(n_in, n_in + len(self.desc.outputs)))
        return tilelang.compile(program, out_idx=out_idx, target="cuda")

    def _build_c(self) -> Callable[..., Any]:
        tilelang = cache.load_tilelang()
        program = cache.load_program(self.source, self.key).main
        c_source = tilelang.lower(program, target="c").kernel_source
        c_source, hits = _parallelise(c_source)
        if hits != 1:
            raise LoweringError("tilelang backend: lowered C source has no block loop to parallelise; "
                                "TileLang's C codegen changed -- update pointwise._build_c")
        self.c_source = c_source
        signature = re.search(r"int32_t (\w+)\(([^)]*)\)\s*\{", c_source)
        symbol = signature.group(1)
        # TileLang's C codegen orders parameters by name, not as declared.
        c_params = [p.split("*")[-1].strip() for p in signature.group(2).split(",")]
        declared = [p.name for p in self.desc.inputs] + [f"out{k}" for k in range(len(self.desc.outputs))]
        if sorted(c_params) != sorted(declared):
            raise LoweringError(f"tilelang backend: C kernel parameters {c_params} do not match "
                                f"the program's {declared}")
        self._order = [declared.index(p) for p in c_params]
        include = os.path.join(os.path.dirname(tilelang.__file__), "src")
        lib = ctypes.CDLL(str(cbuild.build(c_source, include)))
        fn = getattr(lib, symbol)
        fn.argtypes = [ctypes.c_void_p] * (len(self.desc.inputs) + len(self.desc.outputs))
        fn.restype = ctypes.c_int32
        return fn

    def __call__(self, *inputs: Any) -> Tuple[Any, ...]:
        self.build()
        if len(inputs) != len(self.desc.inputs):
            raise LoweringError(f"tilelang pointwise kernel expects {len(self.desc.inputs)} inputs, "
                                f"got {len(inputs)}")
        flat = [contiguous(t) for t in inputs]
        if self.target == "c":
            outs = [empty(flat[0], self.desc.shape, o.dtype) for o in self.desc.outputs]
            pointers = [t.data_ptr() for t in flat] + [o.data_ptr() for o in outs]
            status = self._fn(*[pointers[k] for k in self._order])
            if status != 0:
                raise LoweringError(f"tilelang C kernel {self.key} returned status {status}")
            return tuple(outs)
        result = self._fn(*[t.reshape(-1) for t in flat])
        result = result if isinstance(result, (list, tuple)) else [result]
        return tuple(r.reshape(self.desc.shape) for r in result)


def compile_pointwise(desc: PointwiseDesc, target: str) -> PointwiseKernel:
    """Build (or fetch from the cache) the kernel for ``desc`` on ``target``."""
    return PointwiseKernel(desc, target).build()


def inputs_in_order(desc: PointwiseDesc) -> List[str]:
    return [p.name for p in desc.inputs]
