"""A ``KernelPlan`` runs one ``KernelDesc`` on real tensors.

It maps operand shapes/strides onto the kernel's index space (``Layout``),
renders and imports the source for that layout once, picks block sizes, and
keeps a ``SpecializedLaunch`` per (shapes, strides, alignment) key so the
steady-state call is: one dict lookup, allocate outputs, one launch.

A kernel never receives a tensor without storage (functorch batched tensors,
fake / meta tensors) or one on another device: ``KernelPlan`` raises
``OperandError`` for those (``eager_fallback`` then runs the region eagerly),
except a 0-d CPU tensor next to device tensors, which eager reads as a scalar:
it is copied to the kernel's device (:func:`operand_mover`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...errors import LoweringError
from ...frameworks import adapter_for
from ...ir.meta import contiguous_strides
from ..padded_rows import padded_empty
from .cache import KernelCache, default_cache
from .codegen_columns import column_signature, columns_fit, render_columns
from .codegen_pointwise import KernelSource, render_pointwise
from .codegen_rows import MAX_ROW, render_rows
from .columns import column_launch, config_for
from .kernel_desc import KernelDesc
from .launcher import SpecializedLaunch
from .layout import Layout, broadcast_strides, make_layout, next_pow2

Shape = Tuple[int, ...]
log = logging.getLogger(__name__)


class OperandError(LoweringError):
    """A tensor that no kernel may read: it has no storage or lives on another device."""


def _is_cpu_scalar(t: Any) -> bool:
    return t.ndim == 0 and t.device.type == "cpu"


def operand_mover(tensors: Sequence[Any]) -> Optional[Callable[[tuple], tuple]]:
    """``None`` when every operand is on the kernel's device; else a function copying the
    0-d CPU operands there. Raises ``OperandError`` for any other foreign operand.

    The kernel's device is that of the first operand that is not a 0-d CPU tensor.
    """
    device = next((t.device for t in tensors if not _is_cpu_scalar(t)), None)
    if device is None:
        return None
    scalars = []
    for i, t in enumerate(tensors):
        if t.device == device:
            continue
        if not _is_cpu_scalar(t):
            raise OperandError(f"triton backend: operand {i} is on {t.device} but the kernel "
                               f"runs on {device}; move it to {device} before the call")
        scalars.append(i)
    if not scalars:
        return None

    def move(ts: tuple) -> tuple:
        ts = list(ts)
        for i in scalars:
            ts[i] = ts[i].to(device, non_blocking=True)
        return tuple(ts)
    return move


def eager_fallback(run: Callable[..., Any], eager: Callable[..., Any], what: str
                   ) -> Callable[..., Any]:
    """``run``, but a call whose operands a kernel may not read runs ``eager`` instead,
    with a WARNING (once per cause)."""
    warned: set = set()

    def guarded(*values: Any) -> Any:
        try:
            return run(*values)
        except OperandError as exc:
            if str(exc) not in warned:
                warned.add(str(exc))
                log.warning("%s runs eagerly for this call: %s", what, exc)
            return eager(*values)
    return guarded


def interpreting() -> bool:
    """True when Triton runs in interpreter mode (CPU tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def row_warps(block_n: int) -> int:
    """Warps of a rows kernel whose rows fill ``block_n`` elements. Measured on the H200
    (benchmarks/RESULTS.md): 4 warps beat 8 / 16 for rows up to 4096."""
    return 4 if block_n <= 4096 else (8 if block_n <= 8192 else 16)


def tile_2d(rows: int, cols: int, interpreter: bool = False) -> Tuple[int, int]:
    """``(BLOCK_C, BLOCK_R)`` of a 2-d pointwise kernel: up to 128 columns (a warp reads
    256 contiguous bytes of a 16-bit row), rows to fill 4096 elements, so each thread
    reuses the per-column values it loaded (batch norm's per-channel scale / shift) for
    several rows. The interpreter pays per program: bigger tiles there."""
    block_c = min(next_pow2(cols), 128)
    target = 65536 if interpreter else 4096
    block_r = max(1, min(target // block_c, next_pow2(rows)))
    return block_c, block_r


class PointwiseSpace:
    """Index space over ``shape``; every output has ``shape``.

    ``out_strides`` (per output, None: row-major) are the strides the outputs are written
    with -- eager's, from their ``TensorMeta`` (a channels_last result stays channels_last,
    with no copy after the kernel). The index space walks the dims in the first output's
    memory order, so operands laid out like it are addressed by the flat index.
    """

    def __init__(self, shape: Shape, out_strides: Sequence[Optional[Shape]] = ()) -> None:
        self.shape = tuple(shape)
        self.out_strides = tuple(None if st is None else tuple(st) for st in out_strides)
        first = self.out_strides[0] if self.out_strides else None
        # Outermost first; ties (size-1 dims) keep their order.
        self.order = tuple(range(len(self.shape))) if first is None else tuple(
            sorted(range(len(self.shape)), key=lambda d: -first[d]))

    def strides_of_outputs(self, out_shapes: Sequence[Shape]) -> List[Shape]:
        pad = self.out_strides + (None,) * (len(out_shapes) - len(self.out_strides))
        return [contiguous_strides(s) if st is None else st for s, st in zip(out_shapes, pad)]

    def layout(self, in_meta: Sequence[Tuple[Shape, Shape]], out_shapes: Sequence[Shape]) -> Layout:
        strides = [broadcast_strides(s, st, self.shape) for s, st in in_meta]
        strides += [broadcast_strides(s, st, self.shape)
                    for s, st in zip(out_shapes, self.strides_of_outputs(out_shapes))]
        order = self.order
        return make_layout([self.shape[d] for d in order], [[st[d] for d in order] for st in strides])


class RowsSpace:
    """Rows index space: ``shape`` with ``reduce_dims`` forming each row.

    Operands are full (``shape`` or broadcastable to it) or per-row (the
    reduced shape, with or without the reduced dims kept).
    """

    def __init__(self, shape: Shape, reduce_dims: Sequence[int], dropped: Sequence[bool] = ()) -> None:
        self.shape = tuple(shape)
        #: per operand (inputs, then outputs): a per-row value whose reduced dims were dropped
        self.dropped = tuple(dropped)
        self.reduce_dims = tuple(sorted(d % len(shape) for d in reduce_dims)) if shape else ()
        self.outer = tuple(d for d in range(len(self.shape)) if d not in self.reduce_dims)
        n = 1
        for d in self.reduce_dims:
            n *= self.shape[d]
        self.n = n

    @property
    def reduced_shape(self) -> Shape:
        return tuple(self.shape[d] for d in self.outer)

    def _full_strides(self, shape: Shape, stride: Shape, dropped: bool) -> Shape:
        if dropped:
            lead = len(self.outer) - len(shape)  # eager aligns it with the reduced shape's tail
            shape, stride = [1] * lead + list(shape), [0] * lead + list(stride)
            for d in self.reduce_dims:  # re-insert dropped reduced dims as size 1
                shape.insert(d, 1)
                stride.insert(d, 0)
        return broadcast_strides(shape, stride, self.shape)

    def _col_stride(self, strides: Shape, what: str) -> int:
        dims = [d for d in self.reduce_dims if self.shape[d] != 1]
        for a, b in zip(dims, dims[1:]):
            if strides[a] != strides[b] * self.shape[b]:
                raise LoweringError(f"triton backend: {what} walks the reduced dims {self.reduce_dims} "
                                    f"with strides {strides} that do not form one row; make it contiguous")
        return strides[dims[-1]] if dims else 0

    def layout(self, in_meta: Sequence[Tuple[Shape, Shape]], out_shapes: Sequence[Shape]) -> Layout:
        metas = list(in_meta) + [(s, contiguous_strides(s)) for s in out_shapes]
        dropped = self.dropped + (False,) * (len(metas) - len(self.dropped))
        full = [self._full_strides(s, st, dr) for (s, st), dr in zip(metas, dropped)]
        cols = [self._col_stride(st, f"operand {i}") for i, st in enumerate(full)]
        outer = [tuple(st[d] for d in self.outer) for st in full]
        sizes = self.reduced_shape or (1,)
        if not self.reduced_shape:
            outer = [(0,) for _ in outer]
        base = make_layout(sizes, outer)
        return Layout(base.sizes, base.strides, self.n, tuple(cols))


class KernelPlan:
    """``plan(*tensors) -> list of output tensors`` for one description.

    ``space`` is a ``PointwiseSpace`` or ``RowsSpace``; ``out_shapes`` and
    ``out_dtypes`` (framework dtype objects or names) describe the outputs.
    """

    def __init__(self, desc: KernelDesc, space: Any, out_shapes: Sequence[Shape],
                 cache: Optional[KernelCache] = None) -> None:
        self.desc = desc.validate()
        self.space = space
        self.out_shapes = [tuple(s) for s in out_shapes]
        self.cache = cache or default_cache()
        self._specs: Dict[tuple, tuple] = {}
        self.sources: Dict[tuple, KernelSource] = {}
        #: output index -> (width, pitch): written into zero-padded rows (``pad_rows``)
        self._padded: Dict[int, Tuple[int, int]] = {}

    def render(self, layout: Layout) -> KernelSource:
        """The source for ``layout`` (rendered once per layout signature and kernel shape):
        pointwise; a column kernel (``codegen_columns``) where rows run across memory; else
        a rows kernel, one row per program."""
        split, units = None, ()
        if layout.n is not None and columns_fit(self.desc, layout, MAX_ROW):
            split = config_for(self.desc, layout).split > 1
            units = column_signature(layout) + tuple(c == 1 for c in layout.col_strides)
        sig = layout.signature() + (split, units)
        src = self.sources.get(sig)
        if src is None:
            if split is not None:
                src = render_columns(self.desc, layout, split)
            elif layout.n is None:
                src = render_pointwise(self.desc, layout)
            elif layout.n > MAX_ROW:
                raise LoweringError(f"triton backend: kernel {self.desc.name} needs rows of "
                                    f"{layout.n} elements; rows kernels hold at most {MAX_ROW} "
                                    f"in registers")
            else:
                src = render_rows(self.desc, layout)
            self.sources[sig] = src
        return src

    def layout_for(self, in_meta: Sequence[Tuple[Shape, Shape]]) -> Layout:
        return self.space.layout(in_meta, self.out_shapes)

    def _specialize(self, tensors: Sequence[Any]) -> SpecializedLaunch:
        layout = self.layout_for([(tuple(t.shape), tuple(t.stride())) for t in tensors])
        source = self.render(layout)
        if any(p[0] == "const" for p in source.params):  # a column kernel (codegen_columns)
            return column_launch(lambda s: self.cache.jit_function(s.name, s.text), self.desc,
                                 source, layout)
        fn = self.cache.jit_function(source.name, source.text)
        if layout.n is None and "BLOCK_C" in source.constexprs:
            rows, cols = layout.numel // layout.sizes[-1], layout.sizes[-1]
            block_c, block_r = tile_2d(rows, cols, interpreting())
            grid = ((rows + block_r - 1) // block_r, (cols + block_c - 1) // block_c)
            return SpecializedLaunch(fn, source, layout, grid,
                                     {"BLOCK_R": block_r, "BLOCK_C": block_c}, 4)
        if layout.n is None:
            block = min(1024, max(128, next_pow2(layout.numel)))
            if interpreting():
                block = min(16384, max(128, next_pow2(layout.numel)))
            grid = ((layout.numel + block - 1) // block,)
            return SpecializedLaunch(fn, source, layout, grid, {"BLOCK_SIZE": block}, 4)
        block_n = next_pow2(layout.n)
        warps = int(os.environ.get("TPG_TRITON_ROW_WARPS", row_warps(block_n)))
        rows = layout.numel // max(layout.n, 1) if layout.n else 0
        return SpecializedLaunch(fn, source, layout, (rows,), {"BLOCK_N": block_n}, warps)

    def pad_rows(self, index: int, width: int, pitch: int) -> bool:
        """Write output ``index`` into zero-padded rows of ``pitch`` elements
        (:mod:`..padded_rows`); False when this plan cannot (rows kernels write row-major)."""
        from ..padded_rows import rows_layout
        if not isinstance(self.space, PointwiseSpace):
            return False
        strides = list(self.space.strides_of_outputs(self.out_shapes))
        found = rows_layout(self.out_shapes[index], strides[index], width, pitch)
        if found is None:
            return False
        strides[index] = found[1]
        self.space = PointwiseSpace(self.space.shape, strides)
        self._padded[index] = (width, pitch)
        self._specs.clear()
        self.sources.clear()
        return True

    def __call__(self, *tensors: Any) -> List[Any]:
        (spec, allocate), tensors = specialization(self._specs, tensors, self.desc.name,
                                                   self._build)
        outs = allocate(tensors)
        spec.launch(tensors + tuple(outs))
        return outs

    def _build(self, tensors: Sequence[Any]) -> Tuple[SpecializedLaunch, Callable]:
        return self._specialize(tensors), self._allocator(tensors)

    def _allocator(self, tensors: Sequence[Any]) -> Callable[[Sequence[Any]], List[Any]]:
        """Output allocation for one specialization.

        An output shaped and typed like a contiguous input is made with
        ``empty_like`` of that input: on the launch-bound path it costs about half
        of ``torch.empty(shape, dtype=, device=)``, which parses its arguments.
        """
        torch = adapter_for("torch")
        dtypes = [torch.dtype(o.dtype) for o in self.desc.outputs]
        empty, empty_like = torch.module.empty, torch.module.empty_like  # bound once: per launch
        empty_strided = torch.module.empty_strided
        strides = (self.space.strides_of_outputs(self.out_shapes)
                   if isinstance(self.space, PointwiseSpace)
                   else [contiguous_strides(s) for s in self.out_shapes])
        makers: List[Callable[[Sequence[Any]], Any]] = []
        for index, (shape, dtype, stride) in enumerate(zip(self.out_shapes, dtypes, strides)):
            if index in self._padded:
                width, pitch = self._padded[index]
                makers.append(lambda ts, shape=shape, stride=stride, dtype=dtype, width=width,
                              pitch=pitch: padded_empty(shape, stride, width, pitch, dtype,
                                                        ts[0].device))
                continue
            # empty_like keeps a dense input's strides
            twin = next((i for i, t in enumerate(tensors)
                         if tuple(t.shape) == shape and t.dtype == dtype and
                         tuple(t.stride()) == stride), None)
            if twin is not None:
                makers.append(lambda ts, i=twin: empty_like(ts[i]))
            elif stride == contiguous_strides(shape):
                makers.append(lambda ts, shape=shape, dtype=dtype:
                              empty(shape, dtype=dtype, device=ts[0].device))
            else:
                makers.append(lambda ts, shape=shape, stride=stride, dtype=dtype:
                              empty_strided(shape, stride, dtype=dtype, device=ts[0].device))
        if len(makers) == 1:
            make = makers[0]
            return lambda ts: [make(ts)]
        return lambda ts: [make(ts) for make in makers]


def specialization(specs: Dict[tuple, tuple], tensors: tuple, kernel: str,
                   build: Callable[[Sequence[Any]], Any]) -> Tuple[Any, tuple]:
    """What ``build`` made for operands like ``tensors`` (built the first time their
    :func:`operand_key` is seen, kept in ``specs``), and ``tensors`` moved to the kernel's
    device (:func:`operand_mover`)."""
    key = operand_key(tensors, kernel)
    entry = specs.get(key)
    if entry is None:
        move = operand_mover(tensors)
        moved = tensors if move is None else move(tensors)
        specs[key] = (build(moved), move)
        return specs[key][0], moved
    built, move = entry
    return built, (tensors if move is None else move(tensors))


def operand_key(tensors: Sequence[Any], kernel: str) -> tuple:
    """What a launch specializes on: each operand's shape, strides, device and 16-byte
    alignment."""
    try:
        return tuple([(t.shape, t.stride(), t.device, not t.data_ptr() & 15) for t in tensors])
    except RuntimeError as exc:  # batched / fake tensors have no data pointer
        raise OperandError(f"triton backend: kernel {kernel} was given a tensor without "
                           f"storage ({exc})") from exc
