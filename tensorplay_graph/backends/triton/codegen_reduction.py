"""Statements for reductions and row patterns inside a rows kernel, from the prim records.

The region lowering maps the reduced dims onto the rows index space (any dims,
not only the last: other dims become strided columns), so each reduction is
one masked ``tl.sum`` / ``tl.max`` / ``tl.min`` / product over the row. What a prim
computes comes from its record (``Prim.lowerings["triton"]``): a ``Reduction`` rule
(combine op, identity, element and final expressions), generated here, or a row
builder the record supplies (``var``, ``softmax``, ``layer_norm``), called with a
:class:`RowOps` for the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ...errors import LoweringError
from ...prims.lowering import Reduction
from .kernel_desc import REDUCTIONS, TL_DTYPES, Stmt, compute_dtype, literal

FLOATS = ("float16", "bfloat16", "float32", "float64")


@dataclass
class Emitter:
    """Collects statements and the compute dtype of every value name."""

    stmts: List[Stmt] = field(default_factory=list)
    dtypes: Dict[str, str] = field(default_factory=dict)
    #: values known to hold one value per row (reduction results and what derives from them)
    per_row: Dict[str, bool] = field(default_factory=dict)

    def emit(self, var: str, expr: str, dtype: str, source: str, reduce: Optional[str] = None,
             per_row: bool = False, identity: Optional[str] = None) -> str:
        self.stmts.append(Stmt(var, expr, dtype, reduce, source, identity))
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


class RowOps:
    """What a prim's Triton row builder sees: one node's statements in a rows kernel.

    Values are names (or expressions) of compute values; ``n`` is the row length,
    ``in_dtype`` / ``out_dtype`` the storage dtypes of operand ``a`` and of the result,
    ``dtype`` the compute dtype of the result, ``device_type`` where the kernel runs
    (``"cpu"`` under Triton's interpreter: eager's CPU kernels are then the reference) and
    ``framework`` whose eager semantics the program follows (``"torch"`` / ``"tensorplay"``).
    Each method emits one statement and returns the new value's name (``name`` is a
    suffix; none names the result itself).
    """

    def __init__(self, em: Emitter, out: str, source: str, n: int, in_dtype: str,
                 out_dtype: str, device_type: str = "cuda", framework: str = "torch") -> None:
        self.em, self.out, self.source = em, out, source
        self.n, self.in_dtype, self.out_dtype = n, in_dtype, out_dtype
        self.device_type, self.framework = device_type, framework
        self.dtype = compute_dtype(out_dtype)

    def _name(self, name: Optional[str]) -> str:
        base = f"{self.out}_{name}" if name else self.out
        var, k = base, 1
        while var in self.em.dtypes:
            var, k = f"{base}_{k}", k + 1
        return var

    def float(self, value: str) -> str:
        """``value`` as a floating compute value (floats unchanged)."""
        return self.em.as_float(value, self.out_dtype)

    def cast(self, value: str) -> str:
        """``value`` in the result's compute dtype."""
        return self.em.cast(value, self.out_dtype)

    def literal(self, value: Any) -> str:
        return literal(value)

    @property
    def index(self) -> str:
        """The position along the row (``0 .. n-1``) of each element: a value over the row."""
        return "cols"

    def let(self, expr: str, name: Optional[str] = None, dtype: Optional[str] = None) -> str:
        """A value over the whole row."""
        return self.em.emit(self._name(name), expr, dtype or self.dtype, self.source)

    def per_row(self, expr: str, name: Optional[str] = None, dtype: Optional[str] = None) -> str:
        """A value computed from per-row values only (one per row)."""
        return self.em.emit(self._name(name), expr, dtype or self.dtype, self.source, per_row=True)

    def reduce(self, expr: str, combine: str, name: Optional[str] = None,
               dtype: Optional[str] = None, identity: Optional[float] = None) -> str:
        """``combine`` (sum / prod / max / min) of ``expr`` over the row: one value per row.

        ``identity``: what padding lanes hold for floating values (default: the neutral
        element of ``combine``)."""
        if combine not in REDUCTIONS:
            raise LoweringError(f"triton backend: no row reduction {combine!r} (have "
                                f"{', '.join(REDUCTIONS)}); node {self.source}")
        return self.em.emit(self._name(name), expr, dtype or self.dtype, self.source,
                            reduce=combine,
                            identity=None if identity is None else literal(float(identity)))


def emit_rule(row: RowOps, rule: Any, args: Dict[str, Any]) -> str:
    """Emit a node from its record's Triton lowering; returns the result's value name."""
    if isinstance(rule, Reduction):
        return _emit_reduction(row, rule, args["a"])
    if callable(rule):
        return rule(row, **args)
    raise LoweringError(f"triton backend: node {row.source}: lowering {rule!r} is neither a "
                        f"Reduction nor a row builder fn(row, **args)")


def _emit_reduction(row: RowOps, rule: Reduction, a: str) -> str:
    x = row.float(a) if rule.floating else row.cast(a)
    element = rule.pre.format(x=x)
    final = rule.post != "{acc}"
    nan_check = rule.propagate_nan and row.dtype in FLOATS
    if not (final or nan_check):
        return row.reduce(element, rule.combine, identity=rule.identity)
    acc = row.reduce(element, rule.combine, name="top" if nan_check else rule.combine,
                     identity=rule.identity)
    if nan_check:
        # tl.max / tl.min skip NaN; eager propagates it: count the row's NaNs alongside.
        nans = row.reduce(f"({x} != {x}).to(tl.int32)", "max", name="nans", dtype="int32")
        where = f"tl.where({nans} > 0, float('nan'), {acc})"
        if not final:
            return row.per_row(where)
        acc = row.per_row(where, name="acc")
    return row.per_row(rule.post.format(acc=acc, n=literal(float(row.n))))
