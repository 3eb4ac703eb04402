"""Loss prims: ``cross_entropy`` and the row reduction it decomposes into.

* ``cross_entropy`` -- the framework call (``F.cross_entropy``), kind ``opaque``: it runs
  eagerly as one node, and its gradient is the framework's own (``OPAQUE``). The
  ``decompose`` pass (:mod:`tensorplay_graph.passes.decompose_losses`) rewrites the common
  form -- class-index targets, no ``weight``, no label smoothing -- into prims:
  ``cross_entropy_rows`` then, for ``reduction="mean"``, the sum of the rows over the
  count of targets that are not ``ignore_index`` (both accumulated in float32 / int64, as
  eager's ``nll_loss`` does), cast to the logits' dtype.
* ``cross_entropy_rows(a, target, ignore_index)`` -- kind ``reduction`` over the class dim
  (dim 1; dim 0 of a 1-d input): ``logsumexp(a_row) - a_row[target]`` per row, 0 where
  ``target == ignore_index``, in ``a``'s dtype (eager rounds its log-probabilities to it).
  The Triton lowering is one row pass that never materializes log-probabilities: the row
  max, the sum of ``exp(x - max)`` and the target's logit (picked by position) are three
  reductions over the row in registers. Eager raises for a target outside ``[0, C)``; the
  kernel cannot raise, so it gives NaN there.

Two decompositions share :func:`plain_reduction` (which calls they take) and
:func:`reduce_rows` (the mean / sum over the per-row losses, as eager's ``nll_loss``):
``decompose`` (inference, above) and the joint graph's rewrite
(:mod:`tensorplay_graph.training.functional`, when the logits need a gradient). They differ
in the per-row part, for a reason: ``cross_entropy_rows`` is one reduction whose result
does not expose ``logsumexp`` (and which has no VJP: its gradient would recompute the row
statistics, one more pass over the logits), while training writes
``logsumexp(x) - x[target]`` as plain prims so the min-cut saves the two row statistics
and the backward is one pointwise pass over ``x``, and splits a row longer than one Triton
row kernel (GPT-2's 50257 classes) into two reduction levels, which one reduction prim
over the class dim cannot express.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..errors import ShapeError
from ..frameworks import adapter_for
from ..ir.meta import TensorMeta
from . import register
from .emit import OPAQUE, Emitter
from .lowering import RowBuilder
from .record import Prim
from .rules import category, require_floating, require_meta


def cross_entropy(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0): ...


def cross_entropy_rows(a, target, ignore_index=-100):
    """Per-row cross entropy of logits ``a`` (classes in dim 1) against class indices: the
    framework's own ``cross_entropy(..., reduction="none")`` when run eagerly."""
    functional = adapter_for(a).functional()
    return functional.cross_entropy(a, target, ignore_index=ignore_index, reduction="none")


def legacy_reduction(size_average: Any, reduce: Any, reduction: str) -> str:
    """The ``reduction`` the deprecated ``size_average`` / ``reduce`` flags select (as torch)."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else ("mean" if size_average else "sum")


def plain_reduction(args: Dict[str, Any]) -> Optional[str]:
    """The reduction (``"none"`` / ``"mean"`` / ``"sum"``) of a ``cross_entropy`` call, from
    its canonical arguments, when it has the form both decompositions take -- integer
    class-index targets, no ``weight``, no label smoothing, an int ``ignore_index`` -- else
    None (probability targets, class weights, smoothing: the framework's call stays)."""
    a, target = Emitter.meta(args.get("a")), Emitter.meta(args.get("target"))
    ignore = args.get("ignore_index", -100)
    if a is None or target is None or args.get("weight") is not None \
            or args.get("label_smoothing") not in (0, 0.0) \
            or not target.dtype.startswith(("int", "uint")) \
            or isinstance(ignore, bool) or not isinstance(ignore, int):
        return None
    mode = legacy_reduction(args.get("size_average"), args.get("reduce"),
                            args.get("reduction", "mean"))
    return mode if mode in ("none", "mean", "sum") else None


def reduce_rows(e: Emitter, rows: Any, valid: Any, mode: str) -> Any:
    """The loss from per-row losses ``rows`` (0 at ignored targets), as eager's ``nll_loss``
    reduces them: ``"none"`` keeps them; ``"sum"`` adds them in float32 (float64 for
    float64 rows); ``"mean"`` divides that sum by the sum of ``valid`` (the mask of targets
    that are not ``ignore_index``: all ignored gives 0 / 0 = NaN, as eager). The result is
    cast back to the rows' dtype."""
    if mode == "none":
        return rows
    dtype = e.dtype(rows)
    acc = "float64" if dtype == "float64" else "float32"
    total = e.sum(rows, None, False, acc if acc != dtype else None)
    if mode == "mean":
        total = e.div(total, e.sum(valid))
    return e.to_dtype(total, dtype)


def class_dim(ndim: int) -> int:
    return 1 if ndim >= 2 else 0


def _row_shape(a: TensorMeta) -> tuple:
    d = class_dim(a.ndim)
    return a.shape[:d] + a.shape[d + 1:]


def cross_entropy_meta(a, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                       reduction="mean", label_smoothing=0.0):
    a = require_meta(a, "cross_entropy", "input")
    require_meta(target, "cross_entropy", "target")
    require_floating(a.dtype, "cross_entropy")
    if a.ndim == 0:
        raise ShapeError("cross_entropy: input must have a class dim, got a 0-d tensor")
    mode = legacy_reduction(size_average, reduce, reduction)
    shape = _row_shape(a) if mode == "none" else ()
    grad = a.requires_grad or getattr(weight, "requires_grad", False)
    return TensorMeta(shape, a.dtype, a.device, requires_grad=grad)


def rows_meta(a, target, ignore_index=-100):
    a = require_meta(a, "cross_entropy_rows", "a")
    target = require_meta(target, "cross_entropy_rows", "target")
    require_floating(a.dtype, "cross_entropy_rows")
    if a.ndim == 0 or target.shape != _row_shape(a) or category(target.dtype) != 1:
        raise ShapeError(f"cross_entropy_rows: expected integer class indices shaped "
                         f"{_row_shape(a) if a.ndim else '(input without its class dim)'}, "
                         f"got {target.dtype}{list(target.shape)}")
    return TensorMeta(_row_shape(a), a.dtype, a.device, requires_grad=a.requires_grad)


def rows_dims(ndim: int, **_: Any) -> tuple:
    return (class_dim(ndim),)


def _rows_triton(row, a, target, ignore_index=-100):
    """Three reductions over the row in registers: max, sum of exp(x - max), target logit."""
    x = row.float(a)
    top = row.reduce(x, "max", name="max")
    den = row.reduce(f"tl.exp({x} - {top})", "sum", name="den")
    picked = row.reduce(f"tl.where({row.index} == {target}, {x}, 0.0)", "sum", name="pick")
    nll = row.per_row(f"tl.log({den}) - ({picked} - {top})", name="nll")
    outside = f"({target} < 0) | ({target} >= {row.n})"
    return row.per_row(f"tl.where({target} == {int(ignore_index)}, 0.0, "
                       f"tl.where({outside}, float('nan'), {nll}))")


def _rows_declines(args, out, framework: str) -> Optional[str]:
    ignore = args.get("ignore_index", -100)
    if isinstance(ignore, bool) or not isinstance(ignore, int):
        return f"ignore_index {ignore!r} is not an int"
    return None


register(Prim(
    name="cross_entropy", kind="opaque", signature=cross_entropy, meta=cross_entropy_meta,
    spellings=("torch.nn.functional:cross_entropy",), vjp=lambda e, g, out, **_: OPAQUE,
    traits={"fresh"},
    doc="the framework's cross entropy; decompose rewrites class-index targets without weight "
        "or label smoothing into cross_entropy_rows and a mean / sum"))

register(Prim(
    name="cross_entropy_rows", kind="reduction", signature=cross_entropy_rows, meta=rows_meta,
    dims=rows_dims,
    spellings=("tensorplay_graph.prims.losses:cross_entropy_rows",),
    lowerings={"triton": RowBuilder(_rows_triton, per_row=("target",))},
    declines={"triton": _rows_declines},
    doc="logsumexp over the class dim minus the target's logit; 0 where target == ignore_index"))
