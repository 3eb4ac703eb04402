"""NumPy helpers that give the ``reference`` lowerings eager's numerics, not NumPy's.

NumPy differs from TensorPlay / torch eager in ways that change results:

* it promotes with its own rules (``bool`` -> ``float16`` for ``exp``; a Python float
  scalar is cast to ``float16`` before ``fp16_array * 70000``);
* it computes float16 in float16 where eager computes in float32 ("opmath") and
  rounds once;
* integer ``power`` rejects negative exponents, integer division by zero gives 0;
* it refuses ``-`` on bools and ``axis=0`` on 0-d arrays.

So generated reference code converts every operand explicitly (:func:`as_dtype`,
:func:`scalar`) and calls these helpers where the operation itself differs.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

__all__ = ["opmath", "as_dtype", "scalar", "floor_divide", "trunc_divide", "power", "reduce",
           "in_float64", "NAMESPACE"]

_NP = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16, "int32": np.int32,
       "int64": np.int64, "float16": np.float16, "float32": np.float32, "float64": np.float64}


def opmath(dtype: str) -> str:
    """The dtype eager computes ``dtype`` values in: float32 for 16-bit floats (rounded once
    at the end); int64 for bool arithmetic (``True + True`` is then cast back to bool)."""
    return {"float16": "float32", "bfloat16": "float32", "bool": "int64"}.get(dtype, dtype)


def as_dtype(value: Any, common: str, work: str) -> Any:
    """``value`` converted to the op's common dtype (rounding as eager's cast does), then
    widened to the dtype the op computes in."""
    out = np.asarray(value)
    if out.dtype != _NP[common]:
        out = out.astype(_NP[common])
    return out if common == work else out.astype(_NP[work])


def scalar(value: Any, common: Optional[str], work: str) -> Any:
    """A Python scalar operand: cast to ``common`` first (TensorPlay, and torch outside its
    opmath fast path: ``bool_tensor == 300`` compares with ``bool(300)``), or straight to
    ``work`` when ``common`` is None (torch keeps a scalar in opmath for add/sub/mul/div)."""
    if common is None:
        return np.asarray(value, dtype=_NP[work])
    return as_dtype(np.asarray(value).astype(_NP[common]), common, work)


def _check_integer_divisor(b: Any) -> None:
    if np.any(np.asarray(b) == 0):
        raise RuntimeError("ZeroDivisionError")  # eager's message for integer division by 0


def floor_divide(a: Any, b: Any) -> Any:
    """torch's ``div(rounding_mode="floor")``: Python's divmod rule (NumPy's floor_divide
    implements the same fmod-and-correct algorithm for floats), raising on integer 0."""
    if np.asarray(a).dtype.kind in "iub" and np.asarray(b).dtype.kind in "iub":
        _check_integer_divisor(b)
    return np.floor_divide(a, b)


def trunc_divide(a: Any, b: Any) -> Any:
    """``div(rounding_mode="trunc")``: trunc(a / b) for floats, C integer division for ints."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        _check_integer_divisor(b)
        return (a - np.fmod(a, b)) // b  # exact: the remainder is removed first
    return np.trunc(a / b)


def power(a: Any, b: Any, framework: str = "torch") -> Any:
    """``pow``; for integers torch's rule for negative exponents (1 -> 1, -1 -> +-1, else 0)
    where NumPy raises. TensorPlay computes integer powers in float64 and converts back
    (an out-of-range result becomes the integer minimum, as the C conversion does)."""
    a, b = np.asarray(a), np.asarray(b)
    if framework == "tensorplay" and a.dtype.kind in "iub" and b.dtype.kind in "iub":
        dtype = np.result_type(a, b)
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    if a.dtype.kind not in "iub" or b.dtype.kind not in "iub" or not np.any(b < 0):
        return np.power(a, b)
    safe = np.power(a, np.where(b < 0, 0, b))
    negative = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
    return np.where(b < 0, negative.astype(safe.dtype), safe)


def axpy(a: Any, b: Any, alpha: Any) -> Any:
    """``a + alpha * b`` without an intermediate rounding (eager fuses it) for floats."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a.astype(np.float64) + alpha * b.astype(np.float64)
    return a + alpha * b


def reduce(fn: Any, a: Any, axis: Any, keepdims: bool, dtype: Optional[str] = None, **kw: Any) -> Any:
    """A reduction as eager does it: 16-bit floats accumulate in float32; a 0-d input accepts
    dims 0 / -1 (NumPy raises AxisError); ``dtype=`` casts the input first."""
    x = np.asarray(a)
    if dtype is not None:
        x = x.astype(_NP[dtype])
    if x.dtype == np.float16:
        x = x.astype(np.float32)
    if x.ndim == 0:
        axis = None
    if x.dtype.kind in "ub" and fn is np.sum:
        x = x.astype(np.int64)
    out = fn(x, axis=axis, keepdims=keepdims, **kw)
    if fn in (np.amax, np.amin) and x.dtype.kind == "f":
        out = _first_zero_sign(x, axis, out)
    return out


def _first_zero_sign(x: np.ndarray, axis: Any, out: Any) -> Any:
    """``out`` (an amax / amin of ``x``) with each 0 result signed like the FIRST zero of its
    reduced elements, in row-major order: eager keeps the first of tied extrema (TensorPlay
    always, torch's CPU kernel wherever it is not vectorised), NumPy keeps either."""
    out = np.asarray(out)
    zero = out == 0
    if not zero.any():
        return out
    axes = range(x.ndim) if axis is None else np.atleast_1d(axis)
    reduced = sorted({int(d) % x.ndim for d in axes})
    kept = [d for d in range(x.ndim) if d not in reduced]
    rows = np.transpose(x, kept + reduced).reshape([x.shape[d] for d in kept] + [-1])
    first = np.take_along_axis(rows, np.argmax(rows == 0, axis=-1)[..., None], axis=-1)
    negative = np.signbit(first).reshape(out.shape)
    return np.where(zero, np.where(negative, -0.0, 0.0).astype(out.dtype), out)


def pick(a: Any, b: Any, take_b: Any) -> Any:
    """``b`` where ``take_b`` else ``a``, NaN where either is NaN (min / max / clamp / relu).

    Eager keeps one operand on ties, so the sign of zero follows it: torch's
    ``minimum(0.0, -0.0)`` is ``0.0`` (the first operand) where NumPy's is ``-0.0``.
    """
    a, b = np.asarray(a), np.asarray(b)
    out = np.where(take_b, b, a)
    if out.dtype.kind in "fc":  # ``out`` is a fresh array: NaNs go in place, not into a copy
        np.copyto(out, np.asarray(np.nan, out.dtype), where=np.isnan(a) | np.isnan(b))
    return out


#: Elements per float64 block of :func:`in_float64`: small enough that the float64 copies
#: stay a fraction of the float32 arrays they come from.
FLOAT64_BLOCK = 1 << 16


def in_float64(fn: Any, a: Any) -> Any:
    """``fn`` of float32 ``a`` computed in float64 and rounded once to float32, in blocks.

    NumPy's float32 ``tanh`` / ``exp`` ... are up to an ulp off eager's (``tanh(9.5)``:
    0.99999994 vs 1.0, which a following ``trunc`` turns into 0 vs 1); the float64 result
    rounded once is correctly rounded, as eager's libm is where it matters. Blocks keep the
    float64 temporaries small (the reference backend's peak memory stays near eager's).
    """
    a = np.asarray(a)
    out = np.empty(a.shape, np.float32)
    src, dst = a.reshape(-1), out.reshape(-1)
    for start in range(0, src.size, FLOAT64_BLOCK):
        block = slice(start, start + FLOAT64_BLOCK)
        dst[block] = fn(src[block].astype(np.float64))
    return out


NAMESPACE = {"_f64": in_float64, "_pick": pick, "_as": as_dtype, "_scalar": scalar, "_floordiv": floor_divide,
             "_truncdiv": trunc_divide, "_pow": power, "_reduce": reduce, "_axpy": axpy}
