"""Lowering templates and backend checks of the pointwise prims (records: ``pointwise.py``).

Templates are over canonical arguments (operands as expression names or Python scalars):

* ``reference`` -- NumPy expression, evaluated with ``REFERENCE_NAMESPACE``; the caller
  casts the result to the node's dtype.
* ``triton`` -- Triton expression over fp32 values (``tanh`` via ``sigmoid``, ``erf`` via
  Abramowitz-Stegun 7.1.26, |error| < 1.5e-7; libdevice only where a GPU compile needs
  CUDA eager's own routine: ``pow``, correctly rounded ``div``). ``triton_integer`` /
  ``triton_float64`` variants, where a record has them, take integer operands / a float64
  result.
* ``tilelang`` -- TileLang ``T.*`` expression.

The checks beside them (``*_declines``, the cases where a template exists but cannot match
eager) are in ``pointwise_declines.py``.
"""

from __future__ import annotations

import math
import os
from typing import Any

from .rules import HALF_FLOATS, is_scalar

SQRT_HALF = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654
TL_INF = 'T.infinity("float32")'


def add_tpl(sign: str, mul: str = "*"):
    def render(a, b, alpha=1):
        if alpha == 1:
            return f"({a} {sign} {b})"
        factor = alpha if isinstance(alpha, str) else repr(alpha)  # text: inf, nan, -0.0
        return f"({a} {sign} {factor} {mul} {b})"
    return render


def add_ref(sign: str):
    """``a + alpha * b`` as one fused multiply-add, like eager's float32 kernel (no overflow
    of ``alpha * b`` alone): computed in float64, rounded once by the caller's cast."""
    def render(a, b, alpha=1):
        if alpha == 1:
            return f"({a} {sign} {b})"
        return f"_axpy({a}, {b}, {sign}{alpha!r})"
    return render


def div_ref(a, b, rounding_mode=None, framework="torch"):
    """torch floors as Python's divmod does (``1 // 0.1 == 9``); TensorPlay floors the
    quotient (``floor(1 / 0.1) == 10``)."""
    if rounding_mode == "trunc":
        return f"_truncdiv({a}, {b})"
    if rounding_mode == "floor":
        return f"_floordiv({a}, {b})" if framework == "torch" else f"np.floor({a} / {b})"
    return f"({a} / {b})"


def div_triton_integer(a, b, rounding_mode=None):
    """Integer operands (cast to eager's promoted integer dtype): trunc is Triton's own
    integer ``//``, which truncates toward zero (C) and is exact. Through float32
    (``div_triton``) a quotient past 2**24 rounds: -2**31 // 300 gave -7158279 (seed
    82001065). Floor is declined (``div_floor_declines``); true division is float."""
    if rounding_mode == "trunc":
        return f"({a} // {b})"
    if gpu_triton():  # float32, as eager's true division of integers (``div_rn`` takes floats)
        a, b = f"(({a}) * 1.0)", f"(({b}) * 1.0)"
    return div_triton(a, b, rounding_mode)


def div_triton(a, b, rounding_mode=None):
    """float32 (and 16-bit, computed in float32). CUDA eager divides correctly rounded;
    Triton's float32 ``/`` on a GPU is ``div.full`` (2 ulp): ``(x / x).int()`` gave 0 where
    eager gives 1 (GPU fuzz seed 101120120)."""
    if gpu_triton():  # libdevice takes no integer operand: a Python int as a float
        a, b = (repr(float(v)) if isinstance(v, int) else v for v in (a, b))
        return _rounded(f"libdevice.div_rn({a}, {b})", rounding_mode)
    return _rounded(f"({a} / {b})", rounding_mode)


def div_triton_float64(a, b, rounding_mode=None):
    """A float64 result: Triton's ``/`` is correctly rounded there (``div.rn.f64``)."""
    return _rounded(f"({a} / {b})", rounding_mode)


def _rounded(q: str, rounding_mode: Any) -> str:
    if rounding_mode == "floor":
        return f"tl.floor({q})"
    if rounding_mode == "trunc":
        return f"tl.where({q} < 0, tl.ceil({q}), tl.floor({q}))"
    return q


def _literal_zero(b: Any) -> bool:
    """``b`` is a literal 0 (a Python number, or its float32 TIR text)."""
    if isinstance(b, str):
        return b in ("0.0", "-0.0")
    return isinstance(b, (int, float)) and float(b) == 0.0


def div_tilelang(a, b, rounding_mode=None):
    if _literal_zero(b):
        # TIR folds a literal division by zero into an error; a * (+-inf) is the same value
        # (0 * inf = nan like 0 / 0), with the sign of the zero.
        negative = b.startswith("-") if isinstance(b, str) else math.copysign(1.0, float(b)) < 0
        q = f"({a} * ({'-' if negative else ''}{TL_INF}))"
    else:
        q = f"({a} / {b})"
    return {None: q, "trunc": f"T.trunc{q}", "floor": f"T.floor{q}"}[rounding_mode]


def erf_triton(z: str) -> str:
    """Abramowitz-Stegun 7.1.26 with the sign restored: erf(-z) = -erf(z)."""
    t = f"(1.0 / (1.0 + 0.3275911 * tl.abs({z})))"
    poly = (f"((((1.061405429 * {t} - 1.453152027) * {t} + 1.421413741) * {t}"
            f" - 0.284496736) * {t} + 0.254829592) * {t}")
    y = f"(1.0 - {poly} * tl.exp(-({z}) * ({z})))"
    return f"({y} * tl.where({z} < 0, -1.0, 1.0))"


def gelu(backend: str):
    def render(a, approximate="none"):
        if approximate == "tanh":
            inner = f"{SQRT_2_OVER_PI} * ({a} + 0.044715 * {a} * {a} * {a})"
            tanh = {"reference": f"np.tanh({inner})", "triton": f"(2.0 * tl.sigmoid(2.0 * ({inner})) - 1.0)",
                    "tilelang": f"T.tanh({inner})"}[backend]
            return f"(0.5 * {a} * (1.0 + {tanh}))"
        z = f"({a} * {SQRT_HALF})"
        erf = {"reference": f"erf({z})", "triton": erf_triton(z), "tilelang": f"T.erf({z})"}[backend]
        return f"(0.5 * {a} * (1.0 + {erf}))"
    return render


def pow_triton_float64(a, b):
    """A float64 result: libdevice's ``pow`` would need both operands float64 (a Python
    exponent is float32 to Triton); the exp2 / log2 form in float64 is well within tolerance."""
    return pow_triton(a, b, libdevice=False)


def pow_triton(a, b, libdevice=True):
    """C99 / torch ``pow`` special cases: x**0 == 1 and 1**y == 1 (NaN included),
    (-1)**+-inf == 1, signed zeros and infinities, negative base with an integer exponent."""
    if is_scalar(b) and not is_scalar(a):
        ones = "tl.where({a} == {a}, 1.0, 1.0)"  # 1.0 shaped like a, NaN included
        # torch computes x ** 0.5 / x ** -0.5 as sqrt / rsqrt (pow(-inf, 0.5) is nan there)
        small = {0: ones, 1: "{a}", 2: "({a} * {a})", 3: "({a} * {a} * {a})", 0.5: "tl.sqrt({a})",
                 -1: "(1.0 / {a})", -0.5: "(1.0 / tl.sqrt({a}))"}
        if b in small:
            return small[b].format(a=a)
    if libdevice and gpu_triton():
        # CUDA eager's pow is libdevice's (C99 special cases included); the exp2 / log2 form
        # below is 6.6 ulp off it at worst on the H200, libdevice's 0.7 (measured:
        # benchmarks/triton_special_values_gpu.py; fuzz seed 101040152)
        a, b = (repr(float(v)) if isinstance(v, int) else v for v in (a, b))
        return f"libdevice.pow({a}, {b})"
    if is_scalar(a) and a > 0:  # scalar ** tensor: the log is a constant
        if a == 1:
            return f"tl.where({b} == {b}, 1.0, 1.0)"
        return f"tl.exp2({b} * {math.log2(a)!r})"
    mag = f"tl.exp2({b} * tl.log2(tl.abs({a}) + 0.0))"
    exponent = _NONFINITE.get(b, b) if isinstance(b, str) else b  # inf arrives as its text
    if is_scalar(exponent):
        # decided here: `tl.floor(2.5) & ...` on Python constants fails in Triton's
        # interpreter (bitwise_and of floats; fuzz seeds 6000000+: 64 regions ran eagerly)
        whole = repr(_whole(exponent))
        odd = repr(_whole(exponent) and math.isfinite(exponent) and
                   exponent - 2.0 * math.floor(exponent * 0.5) == 1.0)
    else:
        whole = f"(({b}) == tl.floor({b}))"
        odd = f"({whole} & (({b}) - 2.0 * tl.floor(({b}) * 0.5) == 1.0))"
    # -0.0 counts as negative for the sign of an odd power (pow(-0.0, -1) == -inf).
    if is_scalar(a):
        if a == 0:
            mag = f"tl.exp2({b} * float('-inf'))"
        negative = "True" if math.copysign(1.0, a) < 0 else "False"
    else:
        negative = f"((({a}) < 0) | ((({a}) == 0) & ((1.0 / ({a})) < 0)))"
    signed = f"tl.where({odd}, -{mag}, {mag})"
    finite_neg = f"((({a}) < 0) & (({a}) > float('-inf')))"
    neg = f"tl.where({whole}, {signed}, tl.where({finite_neg}, float('nan'), {mag}))"
    value = f"tl.where({negative}, {neg}, {mag})"
    if is_scalar(exponent):  # b == 0 took the `small` path above
        one = f"((({a}) == 1) | (({a}) == -1))" if math.isinf(exponent) else f"(({a}) == 1)"
        return f"tl.where({one}, 1.0, {value})"
    # No `|` / `&` between a's and b's tests: the interpreter cannot `|` a block with a
    # per-row 0-d exponent (numpy bitwise_or TypeError, seed 40001155: x ** x.amax(...)).
    minus_one_inf = f"(tl.where(({a}) == -1, tl.abs({b}), 0.0) == float('inf'))"
    return (f"tl.where(({b}) == 0, 1.0, tl.where(({a}) == 1, 1.0, "
            f"tl.where({minus_one_inf}, 1.0, {value})))")


#: Non-finite scalar operands reach the templates as source text (``literal``).
_NONFINITE = {"float('inf')": math.inf, "float('-inf')": -math.inf, "float('nan')": math.nan}


def _whole(b: float) -> bool:
    """``b == floor(b)`` as the kernel computes it for a tensor exponent (inf counts)."""
    return math.isinf(b) or (math.isfinite(b) and b == math.floor(b))


def clamp(lo_fn, hi_fn, suffix: str = ""):
    """``lo_fn`` / ``hi_fn``: a function name, or a ``render(a, b)`` builder."""
    def call(fn, a, b):
        return fn(a, b) if callable(fn) else f"{fn}({a}, {b}{suffix})"

    def render(a, min=None, max=None):
        out = a
        if min is not None:
            out = call(lo_fn, out, min)
        if max is not None:
            out = call(hi_fn, out, max)
        return out
    return render


def clamp_ref(a, min=None, max=None):
    # clamp keeps the input on ties (clamp(-0.0, min=0.0) is -0.0) and propagates NaN.
    out = a
    if min is not None:
        out = f"_pick({out}, {min}, {out} < {min})"
    if max is not None:
        out = f"_pick({out}, {max}, {out} > {max})"
    return out


def bf16_bits_triton(x: str) -> str:
    """int32 whose low 16 bits are ``x`` rounded to bfloat16 to nearest-even. Spelled in
    integer ops: Triton's interpreter truncates on ``.to(tl.bfloat16)`` and flushes
    subnormals (GPUs round to nearest-even, as eager does); NaN stays a quiet NaN."""
    f = f"({x}).to(tl.float32)"
    bits = f"{f}.to(tl.int32, bitcast=True)"
    rounded = f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) >> 16)"
    return f"tl.where({f} != {f}, ({bits} >> 16) | 0x40, {rounded})"


def _emulate_bf16() -> bool:
    """Whether bfloat16 conversions are spelled in integer ops: only for Triton's CPU
    interpreter (``TRITON_INTERPRET=1``), whose casts truncate; GPUs convert natively with
    round-to-nearest-even, so their kernels keep the native (cheaper) casts. The
    interpreter runs CPU tensors, so it also selects CPU eager's spellings (clamp)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _triton_keep(op: str):
    """Triton clamp bound that keeps the input on a tie and propagates a NaN bound. Two
    ``tl.where`` rather than ``|``: the interpreter cannot ``|`` a block with a 0-d bound
    (a loaded scalar: TypeError from numpy's bitwise_or, seed 6000330)."""
    def render(a, bound):
        return f"tl.where({a} {op} {bound}, {bound}, tl.where({bound} != {bound}, {bound}, {a}))"
    return render


def clamp_triton(a, min=None, max=None):
    """Triton clamp: under the interpreter (CPU tensors) it keeps the input on a tie, as
    torch's CPU clamp with scalar bounds does (clamp(-0.0, min=0.0) is -0.0; tl.maximum
    gives 0.0, seeds 6001455 / 6001592); on GPUs tl.maximum / tl.minimum, the max / min
    CUDA eager's clamp computes."""
    if _emulate_bf16():
        return clamp(_triton_keep("<"), _triton_keep(">"))(a, min, max)
    return clamp("tl.maximum", "tl.minimum", NAN_ALL)(a, min, max)


def bf16_triton(x: str) -> str:
    """``x`` rounded to a bfloat16 value (for a store)."""
    if not _emulate_bf16():
        return f"{x}.to(tl.bfloat16)"
    return f"{bf16_bits_triton(x)}.to(tl.int16).to(tl.bfloat16, bitcast=True)"


def bf16_round_triton(x: str) -> str:
    """``x`` rounded to bfloat16, kept as float32 (exact, subnormals too)."""
    if not _emulate_bf16():
        return f"{x}.to(tl.bfloat16).to(tl.float32)"
    return f"({bf16_bits_triton(x)} << 16).to(tl.float32, bitcast=True)"


def bf16_load_triton(loaded: str) -> str:
    """A loaded bfloat16 value as float32 (the interpreter's own upcast flushes subnormals)."""
    if not _emulate_bf16():
        return f"{loaded}.to(tl.float32)"
    return f"({loaded}.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)"


def round16_triton(x: str, dtype: str) -> str:
    """A float32 compute value rounded to 16-bit ``dtype`` as eager rounds each op's result."""
    if dtype == "bfloat16":
        return bf16_round_triton(x)
    return f"{x}.to(tl.float16).to(tl.float32)"


def gpu_triton() -> bool:
    """Whether Triton templates render for a GPU compile (not Triton's interpreter, which runs
    CPU tensors and so follows CPU eager)."""
    return os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


def relu_triton(a):
    """CUDA eager's relu gives 0.0 for -0.0 (``max(x, 0)``), CPU eager's keeps -0.0."""
    return f"tl.where({a} <= 0, 0, {a})" if gpu_triton() else f"tl.where({a} < 0, 0, {a})"


#: A NaN cast to these integers on CUDA (GPU fuzz: H200, torch 2.11); other widths not measured.
_CUDA_NAN_AS = {"int32": "0", "int64": "-9223372036854775808.0"}


def cast(backend: str):
    def render(a, dtype):
        if backend == "reference":
            return f"np.asarray({a}).astype(np.{'bool_' if dtype == 'bool' else dtype})" \
                if dtype != "bfloat16" else f"np.asarray({a})"
        if backend == "triton":
            if dtype in HALF_FLOATS:  # round to the narrow dtype, compute in fp32
                return round16_triton(a, dtype)
            if dtype in _CUDA_NAN_AS and gpu_triton():
                # LLVM folds the cast of a NaN known at compile time (``nan * x``) to poison:
                # 16776288 on the H200; CUDA eager's value, written out, survives
                a = f"tl.where({a} != {a}, {_CUDA_NAN_AS[dtype]}, {a})"
            return f"{a}.to(tl.{'int1' if dtype == 'bool' else dtype})"
        return f"T.Cast({dtype!r}, {a})"
    return render


NAN_ALL = ", propagate_nan=tl.PropagateNan.ALL"
# TIR's max / min / fabs lower to C's NaN-dropping fmax / fmin (and fabs is missing on the
# C target): spell eager's NaN-propagating forms out.
TL_ABS = "T.if_then_else({a} < 0, -{a}, T.if_then_else({a} == 0, 0.0, {a}))"


def tl_keep(op: str):
    """TileLang clamp bound that keeps the input on a tie (clamp(-0.0, min=0.0) is -0.0 in
    eager; T.max gives 0.0) and propagates a NaN bound."""
    def render(a, bound):
        return (f"T.if_then_else(T.isnan({bound}), {bound}, "
                f"T.if_then_else({a} {op} {bound}, {bound}, {a}))")
    return render


def tl_nan(fn: str):
    def render(a, b, framework="torch"):
        pick = f"{fn}({a}, {b})"
        if framework == "tensorplay":  # its tie rule (0.0 vs -0.0), as minimum_ref / maximum_ref
            pick = (f"T.if_then_else({b} > {a}, {b}, {a})" if fn == "T.max"
                    else f"T.if_then_else({a} < {b}, {a}, {b})")
        return f"T.if_then_else(T.isnan({a}), {a}, T.if_then_else(T.isnan({b}), {b}, {pick}))"
    return render



def pow_ref(a, b, framework="torch"):
    """TensorPlay's ``int_x ** int_y`` goes through float64; ``int_x ** 3`` is exact (wraps)."""
    tensor_exponent = not (is_scalar(b) or str(b).startswith("_scalar("))
    return f"_pow({a}, {b}, {framework if tensor_exponent else 'torch'!r})"
