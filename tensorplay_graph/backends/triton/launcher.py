"""Lean launch path for generated kernels.

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
import time
from typing import Any, Dict, List, Sequence, Tuple

from . import prewarm
from .codegen_pointwise import KernelSource
from .layout import Layout

log = logging.getLogger(__name__)
compile_log = logging.getLogger("tensorplay_graph.compile")


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
        elif kind == "rows":  # tiled pointwise kernels: the outer dims, flattened
            values.append(layout.numel // layout.sizes[-1])
        elif kind == "cols":
            values.append(layout.sizes[-1])
        elif kind == "size":
            values.append(layout.sizes[param[1]])
        elif kind == "stride":
            values.append(layout.strides[param[1]][param[2]])
        elif kind == "col_stride":
            values.append(layout.col_strides[param[1]])
        elif kind == "const":
            values.append(param[2])
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
        if state == "new":
            prewarm.wait()
            start = time.perf_counter()
        compiled = self.jit_fn[self.grid](*args, **self.options)
        if state == "new":
            seconds = time.perf_counter() - start  # the JIT compiles on the first launch
            (compile_log.info if seconds > 1.0 else compile_log.debug)(
                "triton: compiled %s in %.1f s", getattr(self.jit_fn, "__name__", "kernel"),
                seconds)
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
