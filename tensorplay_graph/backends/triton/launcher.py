"""Lean launch path for generated kernels, and CUDA-graph replay of a whole program.

Per specialization (shapes, strides, pointer alignment) everything but the
pointers is computed once: scalar arguments, grid, constexprs, output shapes.
After the first launch through Triton's JIT (which compiles and returns the
compiled kernel), later launches call the compiled kernel's launcher
directly, skipping argument binding and specialization hashing. If that fast
path is unavailable (interpreter mode, launch hooks set, another Triton
API), launches go through ``jit_fn[grid](...)``.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Sequence, Tuple

from ...frameworks import adapter_for
from .codegen_pointwise import KernelSource
from .layout import Layout

log = logging.getLogger(__name__)


def scalar_params(source: KernelSource, layout: Layout) -> List[Any]:
    """Values of ``source.params`` for ``layout``; pointer slots hold ``None``."""
    values: List[Any] = []
    for param in source.params:
        kind = param[0]
        if kind == "ptr":
            values.append(None)
        elif kind == "numel":
            values.append(layout.numel)
        elif kind == "n":
            values.append(layout.n)
        elif kind == "size":
            values.append(layout.sizes[param[1]])
        elif kind == "stride":
            values.append(layout.strides[param[1]][param[2]])
        elif kind == "col_stride":
            values.append(layout.col_strides[param[1]])
        else:
            raise AssertionError(f"unknown kernel parameter {param}")
    return values


class SpecializedLaunch:
    """One kernel, one layout: ``launch(operands)`` with operands = inputs + outputs."""

    __slots__ = ("jit_fn", "template", "ptr_slots", "grid", "constexpr_values", "options",
                 "_fast", "_state")

    def __init__(self, jit_fn: Any, source: KernelSource, layout: Layout, grid: Tuple[int, ...],
                 constexprs: Dict[str, int], num_warps: int) -> None:
        self.jit_fn = jit_fn
        self.template = scalar_params(source, layout)
        self.ptr_slots = [(pos, p[1]) for pos, p in enumerate(source.params) if p[0] == "ptr"]
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.constexpr_values = [constexprs[name] for name in source.constexprs]
        self.options = dict(constexprs, num_warps=num_warps)
        self._fast = None
        self._state = "new"  # new -> (trial -> fast) | jit

    def _args(self, operands: Sequence[Any]) -> List[Any]:
        args = list(self.template)
        for pos, index in self.ptr_slots:
            args[pos] = operands[index]
        return args

    def launch(self, operands: Sequence[Any]) -> None:
        args = self._args(operands)
        state = self._state
        if state == "fast":
            self._fast(args)
            return
        if state == "trial":  # first direct launch: an incompatible Triton fails before launching
            try:
                self._fast(args)
                self._state = "fast"
                return
            except (TypeError, ValueError, AttributeError) as exc:
                log.warning("triton launcher: direct launch failed (%s); using the JIT path", exc)
                self._state = "jit"
        compiled = self.jit_fn[self.grid](*args, **self.options)
        if state == "new":
            self._fast = _make_fast_path(compiled, self.grid, self.constexpr_values)
            self._state = "trial" if self._fast is not None else "jit"


def _make_fast_path(compiled: Any, grid: Tuple[int, int, int], constexpr_values: List[Any]):
    """A closure launching ``compiled`` directly, or None when that is not possible here.

    It makes the same ``run`` call as ``JITFunction.run`` (launch hooks included, so
    profilers still see the launch), minus argument binding and cache-key hashing.
    """
    if compiled is None or not hasattr(compiled, "packed_metadata"):
        return None  # interpreter mode or an unknown Triton
    try:
        from triton import knobs
        from triton.runtime.driver import driver
        run = compiled.run
        function = compiled.function
        packed = compiled.packed_metadata
        get_device = driver.active.get_current_device
        get_stream = driver.active.get_current_stream
        hooks = knobs.runtime
    except Exception as exc:  # pragma: no cover - depends on the Triton build
        log.debug("triton launcher: fast path unavailable (%s); using the JIT path", exc)
        return None
    g0, g1, g2 = grid
    tail = tuple(constexpr_values)

    def fast(args: List[Any]) -> None:
        stream = get_stream(get_device())
        enter = hooks.launch_enter_hook
        meta = compiled.launch_metadata(grid, stream, *args, *tail) if enter is not None else None
        run(g0, g1, g2, stream, function, packed, meta, enter, hooks.launch_exit_hook, *args, *tail)

    return fast


def _is_cuda_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and getattr(value, "is_cuda", False)


class CudaGraphRunner:
    """Replay ``fn`` (e.g. a compiled GraphModule) through CUDA graphs.

    Per input signature (shapes, strides, dtypes of CUDA tensors; other values
    as they are) the first call runs ``fn`` normally (it compiles kernels and
    settles allocations); the second captures ``fn`` over the very tensors it
    was given and replays it, and later calls with those tensors replay
    directly (one ``graph.replay()``). Calls with other tensors of the same
    signature use a second graph captured over private input buffers, into
    which the inputs are copied first -- the caller's tensors are never
    written. Like Inductor's CUDA graphs, returned tensors are the graph's
    static outputs, overwritten by the next call: clone them to keep them.
    A program that cannot be captured (e.g. it synchronizes with the host)
    logs a warning and runs without graphs.

    >>> fast = CudaGraphRunner(compiled)          # doctest: +SKIP
    >>> out = fast(x, y)                           # doctest: +SKIP
    """

    def __init__(self, fn: Callable[..., Any], max_graphs: int = 8) -> None:
        self.fn = fn
        self.max_graphs = max_graphs
        self._direct: Dict[tuple, Any] = {}    # exact inputs -> (graph, inputs, outputs)
        self._copying: Dict[tuple, Any] = {}   # signature -> graph over private buffers
        self._seen: Dict[tuple, str] = {}      # signature -> "warm" | "captured" | "eager"
        self.captures = 0

    def __call__(self, *args: Any) -> Any:
        key = tuple((a.data_ptr(), a.shape) if _is_cuda_tensor(a) else a for a in args)
        entry = self._direct.get(key)
        if entry is None:
            signature = tuple((a.shape, a.stride(), a.dtype, a.device) if _is_cuda_tensor(a) else a
                              for a in args)
            state = self._seen.get(signature)
            if state is None or state == "eager":
                self._seen[signature] = state or "warm"
                return self._warm_up(args) if state is None else self.fn(*args)
            if state == "warm":
                entry = self._capture(args, signature)
                if entry is None:
                    return self.fn(*args)
                self._direct[key] = entry
                self._seen[signature] = "captured"
            else:
                entry = self._copying.get(signature)
                if entry is None:
                    private = tuple(a.clone() if _is_cuda_tensor(a) else a for a in args)
                    entry = self._capture(private, signature)
                    if entry is None:
                        return self.fn(*args)
                    self._copying[signature] = entry
                for static, new in zip(entry[1], args):
                    if _is_cuda_tensor(new):
                        static.copy_(new)
        entry[0].replay()
        return entry[2]

    def _warm_up(self, args: Sequence[Any]) -> Any:
        # On a side stream, as torch.cuda.graphs recommends before capturing.
        with adapter_for("torch").side_stream():
            out = self.fn(*args)
        return out

    def _capture(self, args: Sequence[Any], signature: tuple) -> Any:
        if len(self._direct) + len(self._copying) >= self.max_graphs:
            self._direct.clear()
            self._copying.clear()
        graph, capturing = adapter_for("torch").cuda_graph()
        try:
            with capturing:
                outputs = self.fn(*args)
        except Exception as exc:
            log.warning("CudaGraphRunner: %s cannot be captured in a CUDA graph (%s: %s); "
                        "running it without graphs", getattr(self.fn, "__name__", self.fn),
                        type(exc).__name__, exc)
            self._seen[signature] = "eager"
            return None
        self.captures += 1
        return graph, args, outputs


def cuda_graph_program(fn: Callable[..., Any], example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """``fn`` replayed through a :class:`CudaGraphRunner` when its inputs are CUDA tensors.

    Used by ``compile(..., options={"cuda_graphs": True})`` on the whole lowered
    program, so every kernel, triton_op and eager node of one call is one replay.
    """
    tensors = [v for v in example_inputs if hasattr(v, "data_ptr") or hasattr(v, "__dlpack__")]
    if not tensors or not all(_is_cuda_tensor(v) for v in tensors):
        log.info("cuda_graphs: inputs are not all torch CUDA tensors; running without CUDA graphs")
        return fn
    return CudaGraphRunner(fn)
