"""Reduction prims: sum mean amax amin var (dim: int, list or None; keepdim).

Global average pooling (``adaptive_avg_pool{1,2,3}d(x, 1)``) is a ``mean`` over the
trailing dims with ``keepdim=True``; other output sizes are not reductions.

The ``reference`` lowering is a NumPy expression; the ``triton`` lowering a
:class:`~tensorplay_graph.prims.lowering.Reduction` (combine op, identity) or, for the
two-pass ``var``, a row builder (see ``prims/lowering.py``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from . import register
from .lowering import Reduction
from .record import Prim
from .rules import category, reduce_meta, require_meta, to_floating


def _axis(dim: Any) -> str:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return "None"
    return repr(dim if isinstance(dim, int) else tuple(dim))


def sum(a, dim=None, keepdim=False, dtype=None): ...          # noqa: A001 - canonical name
def mean(a, dim=None, keepdim=False, dtype=None): ...
def amax(a, dim=None, keepdim=False): ...
def amin(a, dim=None, keepdim=False): ...
def var(a, dim=None, correction=1, keepdim=False): ...


def sum_meta(a, dim=None, keepdim=False, dtype=None):
    a = require_meta(a, "sum", "a")
    default = "int64" if category(a.dtype) < 2 else a.dtype
    return reduce_meta(a, dim, keepdim, dtype or default, "sum")


def mean_meta(a, dim=None, keepdim=False, dtype=None):
    a = require_meta(a, "mean", "a")
    return reduce_meta(a, dim, keepdim, dtype or to_floating(a.dtype), "mean")


def extremum_meta(op: str):
    def meta(a, dim=None, keepdim=False):
        return reduce_meta(require_meta(a, op, "a"), dim, keepdim, a.dtype, op)
    return meta


def var_meta(a, dim=None, correction=1, keepdim=False):
    a = require_meta(a, "var", "a")
    return reduce_meta(a, dim, keepdim, to_floating(a.dtype), "var")


def _correction(unbiased: Optional[bool], correction: Any) -> Any:
    if correction is not None:
        return correction
    return 1 if unbiased is None else int(bool(unbiased))


def _torch_var(args: tuple, kwargs: dict) -> Dict[str, Any]:
    """torch.var(x, dim=None, *, correction, keepdim) and the legacy
    var(x, unbiased) / var(x, dim, unbiased, keepdim) overloads."""
    kw = dict(kwargs)
    a, rest = args[0], list(args[1:])
    if rest and isinstance(rest[0], bool):
        kw["unbiased"] = rest.pop(0)
    elif rest:
        kw["dim"] = rest.pop(0)
        if rest and isinstance(rest[0], bool) and "correction" not in kw:
            kw["unbiased"] = rest.pop(0)
        if rest:
            kw["keepdim"] = rest.pop(0)
    if rest:
        raise TypeError("too many arguments")
    correction = _correction(kw.pop("unbiased", None), kw.pop("correction", None))
    return {"a": a, "correction": correction, **kw}


def _tensorplay_var(args: tuple, kwargs: dict) -> Dict[str, Any]:
    """tensorplay.var(input, correction=1, dim=None, keepdim=False)."""
    names = ("a", "correction", "dim", "keepdim")
    out = dict(zip(names, args))
    out.update({"a" if k in ("input", "self") else k: v for k, v in kwargs.items()})
    return out


def _tensorplay_method_var(args: tuple, kwargs: dict) -> Dict[str, Any]:
    """Tensor.var overloads: var(correction) and var(dim, correction, keepdim)."""
    a, rest = args[0], list(args[1:])
    if len(rest) == 1 and isinstance(rest[0], int) and "keepdim" not in kwargs and "dim" not in kwargs:
        return {"a": a, "correction": rest[0], **kwargs}
    return {"a": a, **dict(zip(("dim", "correction", "keepdim"), rest)), **kwargs}


def _global_pool(spatial: int):
    """``adaptive_avg_pool{k}d(x, 1)``: a mean over the last ``k`` dims, kept as size 1.
    Any other output size is not a reduction (None: the call keeps no prim)."""
    def adapt(args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
        bound = dict(zip(("a", "output_size"), args), **kwargs)
        size = bound.get("output_size")
        sizes = (size,) * spatial if isinstance(size, int) else tuple(size or ())
        if len(sizes) != spatial or any(s != 1 for s in sizes):
            return None
        return {"a": bound.get("input", bound.get("a")), "dim": tuple(range(-spatial, 0)),
                "keepdim": True}
    return adapt


_POOLS = {f"{fw}.nn.functional:adaptive_avg_pool{k}d": _global_pool(k)
          for fw in ("torch", "tensorplay") for k in (1, 2, 3)}


def _record(name, *, signature, meta, reference, triton, **kw):
    spellings = (f"tensorplay:{name}", f"torch:{name}", f"method:{name}") + kw.pop("extra", ())
    return register(Prim(name=name, kind="reduction", signature=signature, meta=meta,
                         spellings=spellings, lowerings={"reference": reference, "triton": triton},
                         **kw))


def _ref(fn: str):
    """``_reduce`` (prims/reference_math.py): eager's accumulation dtype and 0-d dims."""
    def render(a, dim=None, keepdim=False, dtype=None, correction=None):
        extra = f", ddof={correction!r}" if correction is not None else ""
        cast = f", dtype={dtype!r}" if dtype is not None else ""
        return f"_reduce(np.{fn}, {a}, {_axis(dim)}, {bool(keepdim)!r}{cast}{extra})"
    return render


def _row_squares(row: Any, x: str) -> str:
    """The sum of squared deviations of row value ``x`` from its mean, two passes: ``sum(x) /
    n``, then the squared deviations. A constant row (max == min, taken in the first pass) has
    deviations exactly 0, as eager's Welford moments give, where ``x - sum(x) / n`` can be an
    ulp (3 x / 3): its variance was 3.8e-05 / 3, not 0 (seed 85002565). A row of infinities
    or NaNs is not constant here (``inf - inf``, a NaN sum) and keeps eager's NaN. (layer_norm
    corrects its mean instead: cheaper, not exact for every magnitude: ``norms._row_moments``)"""
    n = row.literal(float(row.n))
    total = row.reduce(x, "sum", name="sum")
    top = row.reduce(x, "max", name="top")
    bottom = row.reduce(x, "min", name="bottom")
    mean = row.per_row(f"{total} / {n}", name="mean")
    same = row.per_row(f"(({top} - {bottom}) == 0) & ({total} == {total})", name="same",
                       dtype="bool")
    dev = row.let(f"tl.where({same}, 0.0, {x} - {mean})", name="dev")
    return row.reduce(f"{dev} * {dev}", "sum", name="sq")


def _var_rows(row, a, dim=None, correction=1, keepdim=False):
    """Two passes in registers (the mean, then the squared deviations: ``_row_squares``): as
    accurate as eager's Welford, exact 0 for a constant row."""
    x = row.float(a)
    squares = _row_squares(row, x)
    # n - correction <= 0 gives inf / nan like eager (x / 0 or 0 / 0).
    denominator = max(row.n - (1 if correction is None else correction), 0)
    return row.per_row(f"{squares} / {row.literal(float(denominator))}")


_record("sum", signature=sum, meta=sum_meta, reference=_ref("sum"), triton=Reduction("sum"))
_record("mean", signature=mean, meta=mean_meta, reference=_ref("mean"),
        triton=Reduction("sum", post="{acc} / {n}", floating=True),
        extra=tuple(_POOLS), adapters=_POOLS)
_record("amax", signature=amax, meta=extremum_meta("amax"), reference=_ref("amax"),
        triton=Reduction("max", propagate_nan=True))
_record("amin", signature=amin, meta=extremum_meta("amin"), reference=_ref("amin"),
        triton=Reduction("min", propagate_nan=True))
def _tensorplay_var_declines(args: Dict[str, Any], out: Any, framework: str) -> Optional[str]:
    """TensorPlay 1.0.0 divides by ``n - correction`` even when it is not positive (``var`` of
    one value with correction 2 is 0 / -1 = -0.0); torch and NumPy divide by
    ``max(n - correction, 0)`` (NaN / inf). Eager runs those calls."""
    a, dim = args.get("a"), args.get("dim")
    if framework != "tensorplay" or not hasattr(a, "shape"):
        return None
    dims = range(len(a.shape)) if dim is None or dim == [] else (
        [dim] if isinstance(dim, int) else dim)
    sizes = [a.shape[d] for d in dims]
    correction = 1 if args.get("correction") is None else args["correction"]
    if all(isinstance(n, int) for n in sizes) and math.prod(sizes) - correction > 0:
        return None
    return ("TensorPlay's var divides by n - correction even when it is not positive "
            "(-0.0 where torch gives NaN); not modelled")


_record("var", signature=var, meta=var_meta, reference=_ref("var"), triton=_var_rows,
        declines={"reference": _tensorplay_var_declines, "triton": _tensorplay_var_declines},
        adapters={"torch:var": _torch_var, "method:var": _torch_var,
                  "tensorplay:var": _tensorplay_var, "tensorplay.method:var": _tensorplay_method_var})
