"""GEMM + epilogue kernels: a small description -> a TileLang program -> a callable.

The program follows TileLang's GEMM example: one thread block per
``block_M x block_N`` output tile; ``A_shared``/``B_shared`` tiles fed by
``T.copy`` inside ``T.Pipelined`` (TMA + warp specialisation on Hopper),
``T.gemm`` into the float32 fragment ``C_local``, then the epilogue (bias,
activation, residual, scaling, casts) applied in registers over
``T.Parallel(block_M, block_N)`` before ``C_shared`` is stored once. The
pointwise work after a matmul therefore costs no extra pass over memory.

Shapes must be multiples of the chosen tiles (the heuristic picks tiles that
divide M, N and K); anything else is declined with the reason.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Sequence, Tuple

from ...errors import LoweringError
from . import cache
from .program import contiguous, header

log = logging.getLogger("tensorplay_graph.compile")

GEMM_DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class EpInput:
    """A tensor the epilogue reads: ``col`` = shape (N,), ``full`` = shape (M, N)."""

    name: str
    kind: str
    dtype: str


@dataclass(frozen=True)
class EpStep:
    name: str
    expr: str  # TileLang expression over "acc", epilogue inputs and earlier steps (``<name>_v``)


@dataclass(frozen=True)
class TileConfig:
    block_M: int = 128
    block_N: int = 256
    block_K: int = 64
    num_stages: int = 3
    threads: int = 256

    def divides(self, M: int, N: int, K: int) -> bool:
        return M % self.block_M == 0 and N % self.block_N == 0 and K % self.block_K == 0


@dataclass(frozen=True)
class GemmDesc:
    """``out = epilogue(A @ op(B))`` with A (batch?, M, K); B (batch?, K, N), or (N, K) when trans_b."""

    M: int
    N: int
    K: int
    dtype: str
    out_dtype: str
    trans_b: bool = False
    batch: int = 0  # 0: no batch dimension
    ep_inputs: Tuple[EpInput, ...] = ()
    ep_steps: Tuple[EpStep, ...] = ()
    result: str = "acc"  # the step whose value is stored
    sources: Tuple[str, ...] = ()

    @property
    def flops(self) -> int:
        return 2 * max(self.batch, 1) * self.M * self.N * self.K


# Hopper candidates, best first for large bf16/fp16 problems; the autotuner sweeps them.
CANDIDATES = (
    TileConfig(128, 256, 64, 3, 256),
    TileConfig(256, 128, 64, 3, 256),
    TileConfig(128, 256, 64, 4, 256),
    TileConfig(128, 128, 64, 4, 256),
    TileConfig(128, 128, 64, 3, 128),
    TileConfig(64, 128, 64, 3, 128),
    TileConfig(64, 64, 32, 2, 128),
)


def heuristic_config(desc: GemmDesc) -> Optional[TileConfig]:
    """The first candidate whose tiles divide the problem (big tiles first), or None."""
    for cfg in CANDIDATES:
        if cfg.divides(desc.M, desc.N, desc.K):
            tiles = (desc.M // cfg.block_M) * (desc.N // cfg.block_N) * max(desc.batch, 1)
            # Keep ~one wave of 132 SMs busy before preferring the biggest tile.
            if tiles >= 132 or cfg is CANDIDATES[-1] or desc.M * desc.N < 2048 * 2048:
                return cfg
    return next((c for c in CANDIDATES if c.divides(desc.M, desc.N, desc.K)), None)


def _ep_load(inp: EpInput, batched: bool) -> str:
    if inp.kind == "col":
        return f"{inp.name}[bx * block_N + j]"
    if batched:
        return f"{inp.name}[bz, by * block_M + i, bx * block_N + j]"
    return f"{inp.name}[by * block_M + i, bx * block_N + j]"


def render(desc: GemmDesc, cfg: TileConfig) -> str:
    """The TileLang program text for ``desc`` with tiles ``cfg``."""
    b = desc.batch
    lead = (f"{b}, ",) if b else ("",)
    a_shape = f"({lead[0]}M, K)"
    b_shape = f"({lead[0]}N, K)" if desc.trans_b else f"({lead[0]}K, N)"
    c_shape = f"({lead[0]}M, N)"
    params = [f'A: T.Tensor({a_shape}, "{desc.dtype}")', f'B: T.Tensor({b_shape}, "{desc.dtype}")']
    for e in desc.ep_inputs:
        shape = "(N,)" if e.kind == "col" else c_shape
        params.append(f'{e.name}: T.Tensor({shape}, "{e.dtype}")')
    params.append(f'C: T.Tensor({c_shape}, "{desc.out_dtype}")')
    at = "bz, " if b else ""
    b_tile = "(block_N, block_K)" if desc.trans_b else "(block_K, block_N)"
    b_src = f"B[{at}bx * block_N, ko * block_K]" if desc.trans_b else f"B[{at}ko * block_K, bx * block_N]"
    grid = "T.ceildiv(N, block_N), T.ceildiv(M, block_M)" + (", batch" if b else "")
    ids = "(bx, by, bz)" if b else "(bx, by)"
    lines = [header("GEMM", desc.sources), "import tilelang.language as T", "",
             f"M, N, K = {desc.M}, {desc.N}, {desc.K}"] + ([f"batch = {b}"] if b else []) + [
             f"block_M, block_N, block_K = {cfg.block_M}, {cfg.block_N}, {cfg.block_K}", "", "",
             "@T.prim_func", f"def main({', '.join(params)}):",
             f"    with T.Kernel({grid}, threads={cfg.threads}) as {ids}:",
             f'        A_shared = T.alloc_shared((block_M, block_K), "{desc.dtype}")',
             f'        B_shared = T.alloc_shared({b_tile}, "{desc.dtype}")',
             '        C_local = T.alloc_fragment((block_M, block_N), "float32")',
             f'        C_shared = T.alloc_shared((block_M, block_N), "{desc.out_dtype}")',
             "        T.use_swizzle(panel_size=10)",
             "        T.clear(C_local)",
             f"        for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages={cfg.num_stages}):",
             f"            T.copy(A[{at}by * block_M, ko * block_K], A_shared)",
             f"            T.copy({b_src}, B_shared)",
             f"            T.gemm(A_shared, B_shared, C_local{', transpose_B=True' if desc.trans_b else ''})"]
    if desc.ep_steps:
        lines.append("        for i, j in T.Parallel(block_M, block_N):")
        lines.append("            acc_v = C_local[i, j]")
        for e in desc.ep_inputs:
            lines.append(f'            {e.name}_v = T.Cast("float32", {_ep_load(e, bool(b))})')
        for s in desc.ep_steps:
            lines.append(f"            {s.name}_v = {s.expr}")
        lines.append(f"            C_local[i, j] = {desc.result}_v")
    lines += ["        T.copy(C_local, C_shared)",
              f"        T.copy(C_shared, C[{at}by * block_M, bx * block_N])"]
    return "\n".join(lines) + "\n"


def _key(source: str, desc: GemmDesc, target: Any) -> str:
    return cache.digest(source, (desc.batch, desc.M, desc.N, desc.K), desc.dtype, desc.out_dtype,
                        cache.tilelang_version(), str(target))


def lower_cuda(desc: GemmDesc, cfg: TileConfig, arch: str = "sm_90a") -> str:
    """CUDA C++ source of the kernel for ``arch``; needs no GPU."""
    tilelang = cache.load_tilelang()
    from tvm.target import Target
    source = render(desc, cfg)
    target = {"kind": "cuda", "arch": arch}
    program = cache.load_program(source, _key(source, desc, target)).main
    with Target(target):
        return tilelang.lower(program, target=target).kernel_source


def build_cubin(cuda_source: str, arch: str = "sm_90a", nvcc: str = "nvcc") -> bytes:
    """Compile ``cuda_source`` (from :func:`lower_cuda`) to a cubin with nvcc."""
    import os
    import subprocess
    import tempfile

    tilelang = cache.load_tilelang()
    root = os.path.dirname(tilelang.__file__)
    includes = [os.path.join(root, "src"), os.path.join(root, "3rdparty", "cutlass", "include")]
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as handle:
            handle.write(cuda_source)
        cmd = [nvcc, "-cubin", f"-arch={arch}", "-std=c++17", "-O3", "-w",
               *(f"-I{d}" for d in includes), "-o", out, src]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise LoweringError(f"tilelang backend: nvcc failed on the generated GEMM:\n"
                                f"{result.stderr[-3000:]}")
        with open(out, "rb") as handle:
            return handle.read()


def canonical(desc: GemmDesc) -> GemmDesc:
    """``desc`` with its value names replaced by positional ones (``ep0``, ``st0``...) and no
    source comments: the same GEMM + epilogue in every layer of a model is one program."""
    mapping = {e.name: f"ep{i}" for i, e in enumerate(desc.ep_inputs)}
    mapping.update({st.name: f"st{i}" for i, st in enumerate(desc.ep_steps)})
    if not mapping:
        return replace(desc, sources=())
    names = "|".join(re.escape(n) for n in sorted(mapping, key=len, reverse=True))
    pattern = re.compile(rf"\b({names})_v\b")

    def rename(text: str) -> str:
        return pattern.sub(lambda m: mapping[m.group(1)] + "_v", text)

    return replace(desc, sources=(),
                   ep_inputs=tuple(replace(e, name=mapping[e.name]) for e in desc.ep_inputs),
                   ep_steps=tuple(EpStep(mapping[st.name], rename(st.expr))
                                  for st in desc.ep_steps),
                   result=mapping.get(desc.result, desc.result))


#: compiled programs by key: one compile per distinct program per process (a Future while
#: it builds, so a second kernel asking for it waits instead of compiling it again)
_BUILT: Dict[str, "Future[Any]"] = {}
_BUILT_LOCK = threading.Lock()
_POOL: Optional[ThreadPoolExecutor] = None


def compile_threads() -> int:
    """Threads compiling TileLang kernels side by side (``TPG_TILELANG_COMPILE_THREADS``; 1
    compiles each kernel where it is first needed). Most of a compile is nvcc, a subprocess."""
    return max(1, int(os.environ.get("TPG_TILELANG_COMPILE_THREADS",
                                     min(8, os.cpu_count() or 1))))


def _compile_program(source: str, key: str, n_params: int, label: str) -> Any:
    tilelang = cache.load_tilelang()
    start = time.perf_counter()
    program = cache.load_program(source, key).main
    fn = tilelang.compile(program, out_idx=[n_params - 1], target="cuda")
    seconds = time.perf_counter() - start
    (log.info if seconds > 1.0 else log.debug)("tilelang: compiled %s in %.1f s", label, seconds)
    return fn


def _submit(source: str, key: str, n_params: int, label: str) -> "Future[Any]":
    """The compile of ``key``: already done or under way, else started on the pool now."""
    global _POOL
    with _BUILT_LOCK:
        future = _BUILT.get(key)
        if future is None:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(compile_threads(), thread_name_prefix="tpg-tilelang")
            future = _BUILT[key] = _POOL.submit(_compile_program, source, key, n_params, label)
        return future


class GemmKernel:
    """Callable ``kernel(A, B, *epilogue_inputs) -> (C,)`` on CUDA torch tensors.

    ``source`` is the readable program (value names, source comments); the compiled one is
    :func:`canonical`'s, so identical GEMMs (same shapes, dtypes, epilogue) compile once.
    """

    def __init__(self, desc: GemmDesc, cfg: Optional[TileConfig] = None) -> None:
        cfg = cfg or heuristic_config(desc)
        if cfg is None:
            raise LoweringError(f"tilelang backend: GEMM {desc.M}x{desc.N}x{desc.K} has no tile "
                                f"config dividing it (multiples of 64x64x32 needed); pad the "
                                f"operands or leave the matmul to the interpreter")
        self.desc, self.cfg = desc, cfg
        self.source = render(desc, cfg)
        self.compiled_source = render(canonical(desc), cfg)
        self.key = _key(self.compiled_source, desc, "cuda")
        self._fn = None
        self._future: Optional["Future[Any]"] = None

    def _label(self) -> str:
        d = self.desc
        return (f"GEMM {'%dx' % d.batch if d.batch else ''}{d.M}x{d.N}x{d.K} {d.dtype} "
                f"(+{len(d.ep_steps)} epilogue steps)")

    def build_async(self) -> "GemmKernel":
        """Start compiling in the background (a thread pool); the first call waits for it."""
        if self._fn is None and self._future is None and compile_threads() > 1:
            self._future = _submit(self.compiled_source, self.key, 3 + len(self.desc.ep_inputs),
                                   self._label())
        return self

    def build(self) -> "GemmKernel":
        if self._fn is not None:
            return self
        future = self._future
        if future is None:
            with _BUILT_LOCK:
                future = _BUILT.get(self.key)
        if future is not None:
            self._fn = future.result()
            return self
        fn = _compile_program(self.compiled_source, self.key, 3 + len(self.desc.ep_inputs),
                              self._label())
        done: "Future[Any]" = Future()
        done.set_result(fn)
        with _BUILT_LOCK:
            _BUILT.setdefault(self.key, done)
        self._fn = fn
        return self

    def __call__(self, a: Any, b: Any, *ep: Any) -> Tuple[Any]:
        if self._fn is None:
            self.build()
        d = self.desc
        lead = (d.batch,) if d.batch else ()
        a2 = contiguous(a).reshape(*lead, d.M, d.K)
        ep2 = [contiguous(t).reshape(d.N) if e.kind == "col" else contiguous(t).reshape(*lead, d.M, d.N)
               for t, e in zip(ep, d.ep_inputs)]
        return (self._fn(a2, contiguous(b), *ep2),)


def with_config(kernel: GemmKernel, cfg: TileConfig) -> GemmKernel:
    return GemmKernel(replace(kernel.desc), cfg)


def tflops(desc: GemmDesc, seconds: float) -> float:
    return desc.flops / seconds / 1e12


def candidates_for(desc: GemmDesc) -> Sequence[TileConfig]:
    return [c for c in CANDIDATES if c.divides(desc.M, desc.N, desc.K)]
