"""Statements for reductions (sum, mean, amax, amin, var) inside a rows kernel.

The region lowering maps the reduced dims onto the rows index space (any dims,
not only the last: other dims become strided columns), so each reduction is
one masked ``tl.sum`` / ``tl.max`` / ``tl.min`` over the row. ``var`` is
two-pass in registers (mean first, then squared deviations), which is as
accurate as eager's Welford.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ...errors import LoweringError
from .kernel_desc import TL_DTYPES, Stmt, compute_dtype, literal

FLOATS = ("float16", "bfloat16", "float32", "float64")

#: Reduction prims this backend lowers, with the statement builder for each.
REDUCTION_PRIMS = ("sum", "mean", "amax", "amin", "var")


@dataclass
class Emitter:
    """Collects statements and the compute dtype of every value name."""

    stmts: List[Stmt] = field(default_factory=list)
    dtypes: Dict[str, str] = field(default_factory=dict)
    #: values known to hold one value per row (reduction results and what derives from them)
    per_row: Dict[str, bool] = field(default_factory=dict)

    def emit(self, var: str, expr: str, dtype: str, source: str, reduce: Optional[str] = None,
             per_row: bool = False) -> str:
        self.stmts.append(Stmt(var, expr, dtype, reduce, source))
        self.dtypes[var] = dtype
        self.per_row[var] = per_row or reduce is not None
        return var

    def cast(self, var: str, dtype: str) -> str:
        """``var`` converted to compute dtype ``dtype`` (text unchanged if it already is)."""
        have = self.dtypes.get(var)
        want = compute_dtype(dtype)
        if have == want:
            return var
        return f"{var}.to({TL_DTYPES[want]})"

    def as_float(self, var: str, dtype: str = "float32") -> str:
        have = self.dtypes.get(var, "float32")
        return var if have in FLOATS else f"{var}.to({TL_DTYPES[compute_dtype(dtype)]})"


def emit_reduction(em: Emitter, prim: str, a: str, out: str, out_dtype: str, n: int,
                   source: str, correction=1) -> str:
    """Emit ``out = prim(a)`` over the row of ``n`` elements; returns the value name."""
    cdt = compute_dtype(out_dtype)
    if prim == "sum":
        return em.emit(out, em.cast(a, out_dtype), cdt, source, reduce="sum")
    if prim == "mean":
        total = em.emit(f"{out}_sum", em.as_float(a, out_dtype), cdt, source, reduce="sum")
        return em.emit(out, f"{total} / {literal(float(n))}", cdt, source, per_row=True)
    if prim in ("amax", "amin"):
        if cdt not in FLOATS:
            return em.emit(out, em.cast(a, out_dtype), cdt, source, reduce=prim[1:])
        # tl.max / tl.min skip NaN; eager propagates it: count the row's NaNs alongside.
        x = em.cast(a, out_dtype)
        top = em.emit(f"{out}_top", x, cdt, source, reduce=prim[1:])
        nans = em.emit(f"{out}_nans", f"({x} != {x}).to(tl.int32)", "int32", source, reduce="max")
        return em.emit(out, f"tl.where({nans} > 0, float('nan'), {top})", cdt, source, per_row=True)
    if prim == "var":
        x = em.as_float(a, out_dtype)
        mean = em.emit(f"{out}_mean", x, cdt, source, reduce="sum")
        mean = em.emit(f"{out}_mu", f"{mean} / {literal(float(n))}", cdt, source, per_row=True)
        dev = em.emit(f"{out}_dev", f"{x} - {mean}", cdt, source)
        sq = em.emit(f"{out}_sq", f"{dev} * {dev}", cdt, source, reduce="sum")
        denom = max(n - correction, 0)
        # n - correction <= 0 gives inf/nan like eager (0/0 or x/0).
        return em.emit(out, f"{sq} / {literal(float(denom))}", cdt, source, per_row=True)
    raise LoweringError(f"triton backend: reduction {prim!r} has no lowering "
                        f"(supported: {', '.join(REDUCTION_PRIMS)})")


def reduce_dims(dim, ndim: int) -> tuple:
    """Canonical sorted tuple of reduced dims (``None`` / ``()`` mean every dim)."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if ndim == 0:  # a 0-d tensor reduced over dim 0 / -1: nothing to reduce
        return ()
    return tuple(sorted(d % ndim for d in dims))
