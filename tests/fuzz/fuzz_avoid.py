"""TensorPlay 1.0.0 eager defects the generator keeps out of its programs (FINDINGS.md).

A candidate statement that would hit one is rejected like one eager refuses: the
generator picks another. Each framework's own semantics stay the reference; these are
results no compiler can reproduce, not semantics.
"""

from __future__ import annotations

import re
from typing import Any, Dict

import numpy as np


def tensorplay_eager_defect(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when TensorPlay eager's ``value`` of ``code`` is one of the defects below."""
    return (mislabelled_contiguous(value) or loses_nan_to_bfloat16(T, code, ns, value)
            or equal_inputs_unequal_outputs(T, code, ns, value)
            or softmax_misreads_unit_dim(T, code, ns, value)
            or silu_nan_past_exp_range(T, code, ns, value)
            or int64_extremum_through_double(T, code, ns, value)
            or cast_at_rounding_edge(T, code, ns, value))


def _name(t: Any) -> str:
    return str(t.dtype).split(".")[-1]


def loses_nan_to_bfloat16(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when TensorPlay's bfloat16 ``value`` of ``code`` lost a NaN that float32 keeps.

    TensorPlay 1.0.0 converts float32 to bfloat16 by rounding the bits with no NaN check:
    a NaN whose low mantissa bits are all ones carries into the exponent and becomes
    +-0.0 or inf. Its vectorised sin / cos / tan / tanh / sinh / cosh / log1p produce such
    NaNs (0xffffffff) in their 16-element chunks and ordinary ones (0xffc00000) in the
    scalar tail, so `sin(inf).bfloat16()` is 0.0 or NaN by the element's position (seed
    2017613). NaN payloads are unspecified; compiled code keeps NaN.
    """
    if _name(value) != "bfloat16":
        return False
    wide = {k: v.float() if isinstance(v, T.Tensor) and _name(v) == "bfloat16" else v
            for k, v in ns.items()}
    code32 = code.replace(".bfloat16()", ".float()").replace("T.bfloat16", "T.float32")
    try:
        ref = eval(code32, wide)  # noqa: S307 - the generator's own statement text
    except Exception:  # noqa: BLE001 - no float32 counterpart: nothing to compare
        return False
    if not isinstance(ref, T.Tensor) or tuple(ref.shape) != tuple(value.shape):
        return False
    want = np.isnan(np.asarray(ref.detach().float().contiguous().numpy()))
    got = np.isnan(np.asarray(value.detach().float().contiguous().numpy()))
    return bool((want & ~got).any())


def mislabelled_contiguous(value: Any) -> bool:
    """True when TensorPlay calls ``value`` contiguous although its strides are not row-major.

    TensorPlay 1.0.0's ``round`` / ``clone`` of a permuted tensor keep the permuted strides
    but report ``is_contiguous()``; its elementwise kernels then walk memory order as if it
    were the logical order (`T.round(x_t) == T.round(x_t)` with `zero_()` on one side gave
    transposed answers, seed 6000825; seed 301070). Compiled code reads the real strides.
    """
    if not value.is_contiguous():
        return False
    expected = 1
    for size, stride in reversed(list(zip(value.shape, value.stride()))):
        if size > 1 and stride != expected:
            return True
        expected *= size
    return False


def _nan_mask(t: Any) -> Any:
    return np.isnan(np.asarray(t.detach().float().contiguous().numpy()))


def _named_tensors(T: Any, code: str, ns: Dict[str, Any]) -> Dict[str, Any]:
    """The tensors of ``ns`` that ``code`` names."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
    return {k: v for k, v in ns.items() if k in words and isinstance(v, T.Tensor)}


def _odd_unit_stride(t: Any) -> bool:
    """A size-1 dim whose stride is not the row-major one (TensorPlay still calls it
    contiguous: ``randn(2, 5, 1).transpose(1, 2)`` has strides (5, 1, 1), not (5, 5, 1))."""
    expected = 1
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        if size == 1 and stride != expected:
            return True
        expected *= size
    return False


def softmax_misreads_unit_dim(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when ``code`` takes a TensorPlay ``softmax`` / ``log_softmax`` of a tensor with a
    size-1 dim whose stride is not the row-major one.

    TensorPlay 1.0.0's softmax over such a dim (``randn(3, 5, 1).transpose(1, 2)``, strides
    (5, 1, 1), dim=1) walks the outer rows with that dim's stride: every row after the first
    reads unrelated memory (uninitialized values, different from call to call; seed 20012215:
    eager gave NaN / 2164477696.0 where the answer is 0.0). The same values with row-major
    strides (``x * 1``) are right, as is compiled code. Decided from strides alone: the wrong
    values are whatever memory holds, so comparing them decides nothing reliably.
    """
    return "softmax" in code and any(_odd_unit_stride(v) for v in _named_tensors(T, code, ns).values())


def silu_nan_past_exp_range(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when TensorPlay's ``F.silu`` in ``code`` gave NaN where ``x * sigmoid(x)`` has none.

    TensorPlay 1.0.0's vectorised float32 / float16 / bfloat16 silu returns NaN for x below
    about -88.7 (where exp(-x) overflows) in its 16-element chunks and -0.0 in the scalar
    tail (`F.silu(T.full((20,), -100.0))`: 16 NaNs, then four -0.0; seed 20015187). Its
    float64 silu and compiled code give -0.0.
    """
    if "F.silu(" not in code or not value.is_floating_point():
        return False
    ref_ns = dict(ns, _fuzz_silu=lambda x, inplace=False: x * T.sigmoid(x))
    try:
        ref = eval(code.replace("F.silu(", "_fuzz_silu("), ref_ns)  # noqa: S307 - see above
    except Exception:  # noqa: BLE001 - nothing to compare with
        return False
    if not isinstance(ref, T.Tensor) or tuple(ref.shape) != tuple(value.shape):
        return False
    return bool((_nan_mask(value) & ~_nan_mask(ref)).any())


_INT_DIVISIONS = ("remainder", "fmod", "floor_divide", "//", "%", "rounding_mode")


def tensorplay_eager_would_die(T: Any, code: str, ns: Dict[str, Any]) -> bool:
    """True when running ``code`` could kill TensorPlay 1.0.0's eager process (checked
    before it runs): an integer division / remainder of a tensor holding its dtype's minimum.

    ``INT64_MIN // -1`` (also ``%``, ``fmod``, ``remainder``, ``div(rounding_mode=...)``) traps
    on x86 and TensorPlay dies with SIGFPE (seeds 20002817 / 20005018: `T.remainder(v, -1)` of a
    NaN cast to int64); torch wraps. Such values come from casting NaN / inf to ints.
    """
    if not any(op in code for op in _INT_DIVISIONS):
        return False
    for value in _named_tensors(T, code, ns).values():
        name = _name(value)
        if name in ("int8", "int16", "int32", "int64") and value.numel():
            low = np.iinfo(name).min
            if bool((np.asarray(value.detach().contiguous().numpy()) == low).any()):
                return True
    return False


#: Elementwise one-tensor calls whose TensorPlay kernels have separate vector and scalar paths.
_UNARY_CALL = re.compile(r"^(?:(?:T|F)\.(\w+)\((\w+)\)|(\w+)\.(\w+)\(\))$")
_TRANSCENDENTAL = {"gelu", "silu", "tanh", "sigmoid", "exp", "expm1", "log", "log1p", "sin", "cos",
                   "tan", "sqrt", "rsqrt", "reciprocal", "erf", "mish", "softplus", "elu", "selu",
                   "sinh", "cosh", "atan", "asin", "acos", "log2", "exp2", "hardswish"}


def equal_inputs_unequal_outputs(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when an elementwise TensorPlay call gave two equal input elements different results.

    TensorPlay 1.0.0's float32 ``gelu`` on the AVX-512 machine of 2026-12-02 rounds in its
    16-wide vector lanes and its scalar tail differently: ``gelu(-1.5)`` is -0.10021083 in
    lanes and -0.10021082 in the tail, so a constant tensor's gelu is not constant and an
    ``argmax`` over it picks a tail element (seed 70014006; compiled code rounds every element
    alike). Only ties made from equal inputs are caught: random inputs rarely repeat.
    """
    match = _UNARY_CALL.match(code)
    if match is None:
        return False
    name, arg = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
    t = ns.get(arg)
    if name not in _TRANSCENDENTAL or not isinstance(t, T.Tensor) or \
            tuple(t.shape) != tuple(value.shape) or t.numel() < 2:
        return False
    try:
        a = np.asarray(t.detach().float().contiguous().numpy()).ravel()
        b = np.asarray(value.detach().float().contiguous().numpy()).ravel()
    except Exception:  # noqa: BLE001 - not a float tensor: nothing to compare
        return False
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    same_in = a[1:] == a[:-1]
    differ = (b[1:] != b[:-1]) & ~(np.isnan(b[1:]) & np.isnan(b[:-1]))
    return bool((same_in & differ).any())


_INPLACE_METHOD = re.compile(r"^\s*(\w+)\.(\w+)_\((.*)\)\s*$")


def inplace_disagrees(T: Any, line: str, ns: Dict[str, Any]) -> bool:
    """True when TensorPlay eager's ``a.op_(...)`` (``line``) would store something other than
    its own ``a.op(...)`` of the same dtype (both tried on copies before the statement runs).

    TensorPlay 1.0.0's integer ``clamp`` casts a float bound to the dtype first, so a NaN /
    inf / out-of-range bound becomes INT_MIN (``int32.clamp(max=nan)`` is all -2147483648);
    its ``clamp_`` ignores such a bound (seed 73000648). Compiled code follows ``clamp``;
    which of eager's two answers is meant cannot be told, so such statements stay out.
    """
    match = _INPLACE_METHOD.match(line)
    a = ns.get(match.group(1)) if match else None
    if not isinstance(a, T.Tensor) or not hasattr(a, match.group(2)):
        return False
    try:
        copy = a.detach().clone()
        scope = dict(ns, **{match.group(1): copy})
        want = eval(f"{match.group(1)}.{match.group(2)}({match.group(3)})", scope)  # noqa: S307
        eval(f"{match.group(1)}.{match.group(2)}_({match.group(3)})", scope)  # noqa: S307
    except Exception:  # noqa: BLE001 - either form rejected: the generator's own run decides
        return False
    if not isinstance(want, T.Tensor) or want.dtype != copy.dtype or \
            tuple(want.shape) != tuple(copy.shape):
        return False
    return not _same_values(want, copy)


def _same_values(want: Any, got: Any) -> bool:
    """Equal element by element, NaN equal to NaN (bfloat16 read through float32)."""
    w, g = (np.asarray(t.detach().float().contiguous().numpy()) if _name(t) == "bfloat16" else
            np.asarray(t.detach().contiguous().numpy()) for t in (want, got))
    return bool(((w == g) | (_nan_mask(want) & _nan_mask(got))).all())


_INPLACE_MUL = re.compile(r"^\s*(\w+)(?:\.mul_\(\s*(\w+)\s*\)|\s*\*=\s*(\w+))\s*$")


def inplace_mul_ignored(T: Any, line: str, ns: Dict[str, Any]) -> bool:
    """True when TensorPlay eager's ``a.mul_(b)`` / ``a *= b`` (``line``) would not store
    ``a * b`` (checked on copies before the statement runs).

    TensorPlay 1.0.0's float32 ``mul_`` with a float32 tensor of the same shape leaves
    ``a`` unchanged on the AVX-512 machine of 2026-12-02 (``[1, 2].mul_([2, 2])`` stays
    ``[1, 2]``; a broadcast, strided or other-dtype operand and a number are multiplied;
    seeds 70001130 / 70001292 / 70001445 / 70001490 / 70002556). Whether it does depends on
    the CPU, so the statement is tried rather than recognised.
    """
    match = _INPLACE_MUL.match(line)
    if match is None:
        return False
    a, b = ns.get(match.group(1)), ns.get(match.group(2) or match.group(3))
    if not isinstance(a, T.Tensor) or not isinstance(b, T.Tensor):
        return False
    try:
        a, b = a.detach(), b.detach()
        want, got = a * b, a.clone()
        got.mul_(b)
    except Exception:  # noqa: BLE001 - eager rejects it: the generator's own check says so
        return False
    if tuple(want.shape) != tuple(got.shape) or want.dtype != got.dtype:
        return False
    return not _same_values(want, got)


#: Integers beyond this magnitude are not all representable in float64.
_EXACT_IN_DOUBLE = 2 ** 53


def int64_extremum_through_double(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when ``code`` takes an int64 ``amax`` / ``amin`` of values beyond +-2**53.

    TensorPlay 1.0.0's ``amax`` / ``amin`` over a dim reduce int64 through float64:
    ``amax`` of [-9223372036854775806] is -9223372036854775808 and of [2**53 + 1] is
    2**53, while its own ``max()`` / ``min()`` are exact (seed 40015827: ``long()``
    then ``add_(inf)`` wraps to INT64_MIN + 2, then ``amax(dim=2)``). Compiled code is exact.
    """
    if not ("amax" in code or "amin" in code) or _name(value) != "int64":
        return False
    for t in _named_tensors(T, code, ns).values():
        if _name(t) == "int64" and t.numel():
            if bool((np.abs(np.asarray(t.detach().contiguous().numpy()).astype(np.float64))
                     > _EXACT_IN_DOUBLE).any()):
                return True
    return False


#: Float-to-int casts a statement can spell (``.to(T.int32)``, ``.long()``, ``.int()``).
_INT_CAST = re.compile(r"\.(to\(T\.(int8|int16|int32|int64|uint8)\)|long\(\)|int\(\))")
#: How close (float32 ulps) to a nonzero integer a value's truncation is ill-conditioned.
_EDGE_ULPS = 4


def cast_at_rounding_edge(T: Any, code: str, ns: Dict[str, Any], value: Any) -> bool:
    """True when ``code`` truncates to int a float holding a value within a few ulps of a
    nonzero integer: the last bit of a sum decides between k and k - 1.

    Not a defect on either side: seed 40017246 truncates ``hardswish(x).sum()`` of int32 x,
    6.0 by TensorPlay's summation order and 5.9999995 by NumPy's (one float32 ulp); the
    ill-conditioning check keeps integer inputs exact, so it cannot excuse it.
    """
    if not _INT_CAST.search(code):
        return False
    for t in _named_tensors(T, code, ns).values():
        if _name(t) not in ("float32", "float16", "bfloat16", "float64") or not t.numel():
            continue
        a = np.asarray(t.detach().float().contiguous().numpy(), np.float32)
        k = np.round(a)
        with np.errstate(invalid="ignore"):
            near = np.isfinite(a) & (k != 0) & (np.abs(a - k) <= _EDGE_ULPS * np.spacing(np.abs(a)))
        if bool(near.any()):
            return True
    return False


#: |mean| / std past which a row's float32 statistics are decided by summation order
_OFFSET_RATIO = 2.0 ** 12
#: |x| past which x * x overflows float32's range
_SQUARE_LIMIT = 1.8e19


def statistics_of_offset_rows(value: Any, dim: Any = -1) -> bool:
    """True when some row of float ``value`` along ``dim`` (None: all of it as one row)
    holds nearly equal large values (|mean| > 4096 x std): its mean / variance in float32
    lose the row's spread to rounding; or a value whose square overflows float32 (E10).

    Not a defect on either side (torch seed 83000950, Triton interpreter: ``layer_norm(x1 -
    70000.0)`` over 4 values about 2 apart: eager 3.8701, kernel 3.8567, float64 of the same
    float32 input 3.8674). The ill-conditioning check perturbs inputs, and ``x1 - 70000.0``
    rounds them away, so it cannot excuse it: the generator applies no variance / layer norm
    to such rows (both frameworks)."""
    if _name(value) not in ("float32", "float16", "bfloat16", "float64") or value.numel() < 2:
        return False
    a = np.asarray(value.detach().double().contiguous().numpy(), np.float64)
    if a.ndim == 0:
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        a = a.reshape(1, -1) if dim is None else np.moveaxis(a, dim, -1)
        finite = np.isfinite(a).all(axis=-1)
        mean, std = a.mean(axis=-1), a.std(axis=-1)
        bad = finite & (std > 0) & (np.abs(mean) > _OFFSET_RATIO * std)
        # E10: a square past float32's range (|x| > 1.8e19) overflows the variance, and
        # where the NaN / 0 lands depends on the algorithm (seed 90002244)
        bad |= (np.abs(np.where(np.isfinite(a), a, 0.0)) > _SQUARE_LIMIT).any(axis=-1)
    return bool(bad.any())
