"""Compile every Triton kernel a program's GPU plan would launch, for Hopper, on a CPU machine.

The interpreter (``TRITON_INTERPRET=1``) runs kernels without compiling them, so a kernel it
accepts may still fail Triton's real compile on the GPU (and that region then runs eagerly
there). This module plans a program for CUDA (``explain(..., assume_device="cuda")``), builds
each Triton region's kernel (Triton regions, and the Triton epilogue of a cuBLAS GEMM), and
calls it on CPU tensors shaped and strided like the planned ones, with every launch replaced by
``triton.compile(..., target=GPUTarget("cuda", 90, 32))``. The launch goes through the same
code as on the GPU (block sizes, grids, column splits, output strides), and the compile sees
the specialization Triton's JIT would give it (16-byte divisibility, integers equal to 1 as
constants), computed by Triton's own binder for the Hopper target.

>>> sweep = HopperSweep()                                          # doctest: +SKIP
>>> sweep.check(model, ids)                                        # doctest: +SKIP
>>> sweep.failures                                                 # doctest: +SKIP

Must run without ``TRITON_INTERPRET`` (the interpreter never compiles).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from .launcher import SpecializedLaunch

log = logging.getLogger(__name__)

#: Hopper (H200 / H100): compute capability 9.0, 32 threads per warp
HOPPER = ("cuda", 90, 32)
#: Shared memory one block may use on Hopper (227 KB); more fails at launch, not at compile
HOPPER_SHARED = 232448


@dataclass
class CompileRecord:
    """One distinct kernel specialization compiled for Hopper."""

    kernel: str
    where: str                 # the program / region that launched it
    seconds: float
    error: Optional[str] = None
    source: str = field(default="", repr=False)
    signature: Dict[str, str] = field(default_factory=dict, repr=False)


class HopperCompiler:
    """Compiles launches ``(jit_fn, args, options)`` for Hopper, once per distinct
    (source, specialization, options); keeps a record of each."""

    def __init__(self) -> None:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        self.target = GPUTarget(*HOPPER)
        self.backend = make_backend(self.target)
        self.records: List[CompileRecord] = []
        self.launches = 0
        self.where = ""
        self._seen: Dict[tuple, CompileRecord] = {}
        self._binders: Dict[int, Any] = {}

    def _binder(self, fn: Any) -> Any:
        binder = self._binders.get(id(fn))
        if binder is None:
            from triton.runtime.jit import create_function_from_signature
            binder = self._binders[id(fn)] = (fn, create_function_from_signature(
                fn.signature, fn.params, self.backend))
        return binder[1]

    def compile(self, fn: Any, args: Sequence[Any], options: Dict[str, Any]) -> CompileRecord:
        """Build ``fn`` for Hopper as ``fn[grid](*args, **options)`` would on an H200."""
        import triton
        from triton.compiler import ASTSource
        self.launches += 1
        kwargs = dict(options, debug=False)
        bound, specialization, parsed = self._binder(fn)(*args, **kwargs)
        text = getattr(fn, "src", "") or ""
        key = (hashlib.sha256(text.encode()).hexdigest(), repr(specialization),
               tuple(sorted(options.items())))
        record = self._seen.get(key)
        if record is not None:
            return record
        opts, signature, constexprs, attrs = fn._pack_args(self.backend, kwargs, bound,
                                                           specialization, parsed)
        start = time.perf_counter()
        error = None
        try:
            compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                                      target=self.target, options=opts.__dict__)
            shared = getattr(compiled.metadata, "shared", 0)
            if not compiled.asm.get("cubin"):
                error = "no cubin produced"
            elif shared > HOPPER_SHARED:
                error = (f"OutOfResources: needs {shared} bytes of shared memory per block "
                         f"(Hopper: {HOPPER_SHARED})")
        except Exception as exc:  # noqa: BLE001 - a compile error is the finding
            error = f"{type(exc).__name__}: {exc}"
        record = CompileRecord(getattr(fn, "__name__", "kernel"), self.where,
                               time.perf_counter() - start, error, text, dict(signature))
        if error:
            log.warning("kernel %s (%s) does not compile for sm_90: %s", record.kernel,
                        self.where, error.splitlines()[0][:400])
        self._seen[key] = record
        self.records.append(record)
        return record

    @contextlib.contextmanager
    def launches_compile(self):
        """While active, a generated kernel's launch compiles it for Hopper instead of running."""
        original = SpecializedLaunch.launch
        compiler = self

        def launch(spec: SpecializedLaunch, operands: Sequence[Any]) -> None:
            compiler.compile(spec.jit_fn, spec._args(operands), spec.options)

        SpecializedLaunch.launch = launch
        try:
            yield self
        finally:
            SpecializedLaunch.launch = original


class HopperSweep:
    """Plans programs for CUDA and compiles every Triton kernel of the plan for Hopper."""

    def __init__(self, backends: Sequence[str] = ("triton", "tilelang"), gemm: str = "auto",
                 misaligned: bool = False) -> None:
        """``misaligned``: also launch every region with its inputs one element off 16-byte
        alignment (a view at an odd offset): the specialization without divisibility hints."""
        self.backends, self.gemm, self.misaligned = list(backends), gemm, misaligned
        self.compiler = HopperCompiler()
        self.regions = 0
        self.lowering_errors: List[str] = []

    @property
    def records(self) -> List[CompileRecord]:
        return self.compiler.records

    @property
    def failures(self) -> List[CompileRecord]:
        return [r for r in self.records if r.error]

    def check(self, fn: Any, *inputs: Any, name: str = "program") -> Any:
        """Plan ``fn`` on ``inputs`` for CUDA, then compile each Triton kernel of the plan.

        Returns the ``Explanation``. Regions whose kernel could not be built at all (a
        lowering error) are kept in ``lowering_errors``."""
        import tensorplay_graph as tpg
        with _recording_triton_regions() as built:
            report = tpg.explain(fn, *inputs, backend=self.backends, assume_device="cuda",
                                 gemm=self.gemm)
        for region_id, why in report.kernel_errors.items():
            self.lowering_errors.append(f"{name}: region {region_id}: {why}")
        with self.compiler.launches_compile():
            for region, kernel in built:
                self.regions += 1
                self.compiler.where = f"{name}: region {region.id} ({', '.join(region.names)[:80]})"
                kernel.fn(*[_example(v) for v in region.inputs])
                if self.misaligned:
                    kernel.fn(*[_example(v, offset=1) for v in region.inputs])
        return report


def _example(node: Any, offset: int = 0) -> Any:
    """A CPU tensor with ``node``'s planned shape, strides and dtype (contents unused: the
    kernels compile, never run), ``offset`` elements into its storage; or the value itself
    for a constant operand."""
    from ...frameworks import adapter_for
    from ...ir.meta import TensorMeta
    meta = node.meta.get("tensor_meta") if hasattr(node, "meta") else None
    if not isinstance(meta, TensorMeta):
        return node
    torch = adapter_for("torch")
    shape, stride = tuple(meta.shape), tuple(meta.stride)
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0
    base = torch.module.empty((extent + offset,), dtype=torch.dtype(meta.dtype))
    return base.as_strided(shape, stride, offset)


@contextlib.contextmanager
def _recording_triton_regions():
    """Every ``(region, kernel)`` the Triton backend builds meanwhile (its own regions, and
    GEMM epilogues the cuBLAS path hands it), ``triton_op`` nodes left out (their kernels
    are the user's)."""
    from .backend import TritonBackend, _custom_op
    built: List[tuple] = []
    original = TritonBackend.compile

    def compile(self: Any, region: Any) -> Any:
        kernel = original(self, region)
        if not (len(region.nodes) == 1 and _custom_op(region.nodes[0].target) is not None):
            built.append((region, kernel))
        return kernel

    TritonBackend.compile = compile
    try:
        yield built
    finally:
        TritonBackend.compile = original


def training_halves(step: Any, *inputs: Any) -> List[tuple]:
    """``[("forward", gm, args), ("backward", gm, args)]``: the forward and backward graphs
    ``tensorplay_graph.compile`` builds for ``step(*inputs)`` (a scalar loss) from the prims'
    VJP rules, with example arguments (the forward is run once, on the CPU, for the saved
    values' shapes)."""
    from ...capture import capture
    from ...training.joint import build_joint
    from ...training.mincut import example_arguments, split_joint
    captured = capture(step, *inputs)
    joint = build_joint(captured, tuple(inputs))
    split = split_joint(joint)
    primals, backward_args = example_arguments(captured, joint, split, inputs)
    return [("forward", split.forward, primals), ("backward", split.backward, backward_args)]

