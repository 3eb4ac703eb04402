"""Pointwise prims: arithmetic, transcendental, activations, comparisons, logic, casts.

Every record carries three lowering templates over its canonical arguments
(operands as expression names or Python scalars):

* ``reference`` -- NumPy expression, evaluated with ``REFERENCE_NAMESPACE``
  (``np`` and an exact vectorised ``erf``); the caller casts the result to the
  node's dtype.
* ``triton`` -- Triton expression over fp32 values (no libdevice: ``tanh`` via
  ``sigmoid``, ``erf`` via Abramowitz-Stegun 7.1.26, |error| < 1.5e-7).
* ``tilelang`` -- TileLang ``T.*`` expression.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir.meta import TensorMeta
from . import register
from .record import Prim
from .reference_math import NAMESPACE as _REFERENCE_HELPERS
from .rules import (broadcast_shapes, current_framework, device_of, is_meta, is_scalar,
                    require_meta, result_type, tensor_operands, to_floating)

REFERENCE_NAMESPACE = {"np": np, "erf": np.vectorize(math.erf, otypes=[np.float64]),
                       **_REFERENCE_HELPERS}
#: Canonical parameters that are a pointwise prim's numeric operands (converted by backends).
OPERANDS = ("a", "b", "min", "max")

SQRT_HALF = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654


# ----------------------------------------------------------------------------- meta rules

def _pointwise_meta(operands: tuple, dtype: str) -> TensorMeta:
    tensors = tensor_operands(*operands)
    shape = broadcast_shapes(*(t.shape for t in tensors))
    grad = any(t.requires_grad for t in tensors)
    return TensorMeta(shape, dtype, device_of(*operands), requires_grad=grad)


def same_dtype(a, **_):
    return _pointwise_meta((require_meta(a, "pointwise", "a"),), a.dtype)


def floating(a, **_):
    return _pointwise_meta((require_meta(a, "pointwise", "a"),), to_floating(a.dtype))


def promoted(a, b, **_):
    return _pointwise_meta((a, b), result_type(a, b))


def left_scalar_as_tensor(a, b, **_):
    """``2 - x`` / ``2.5 ** x`` in TensorPlay: its reflected operators wrap the left scalar
    in a 0-d int64 / float64 tensor, which promotes as a tensor (``2 - bool_x`` is int64)."""
    if current_framework() == "tensorplay" and is_scalar(a) and is_meta(b):
        a = TensorMeta((), "float64" if isinstance(a, float) else "int64", b.device)
    return promoted(a, b)


def boolean(a, b=None, **_):
    return _pointwise_meta((a, b), "bool")


def div_meta(a, b, rounding_mode=None):
    dtype = result_type(a, b)
    return _pointwise_meta((a, b), to_floating(dtype) if rounding_mode is None else dtype)


def where_meta(cond, a, b):
    return _pointwise_meta((cond, a, b), result_type(a, b))


def clamp_meta(a, min=None, max=None):
    return _pointwise_meta((a, min, max), result_type(a, *(v for v in (min, max) if v is not None)))


def cast_meta(a, dtype):
    a = require_meta(a, "cast", "a")
    return TensorMeta(a.shape, dtype or a.dtype, a.device, requires_grad=a.requires_grad)


# ----------------------------------------------------------------------------- templates

def _add_tpl(sign: str, mul: str = "*"):
    def render(a, b, alpha=1):
        return f"({a} {sign} {b})" if alpha == 1 else f"({a} {sign} {alpha!r} {mul} {b})"
    return render


def _add_ref(sign: str):
    """``a + alpha * b`` as one fused multiply-add, like eager's float32 kernel (no overflow
    of ``alpha * b`` alone): computed in float64, rounded once by the caller's cast."""
    def render(a, b, alpha=1):
        if alpha == 1:
            return f"({a} {sign} {b})"
        return f"_axpy({a}, {b}, {sign}{alpha!r})"
    return render


def _div_ref(a, b, rounding_mode=None, framework="torch"):
    """torch floors as Python's divmod does (``1 // 0.1 == 9``); TensorPlay floors the
    quotient (``floor(1 / 0.1) == 10``)."""
    if rounding_mode == "trunc":
        return f"_truncdiv({a}, {b})"
    if rounding_mode == "floor":
        return f"_floordiv({a}, {b})" if framework == "torch" else f"np.floor({a} / {b})"
    return f"({a} / {b})"


def _div_triton(a, b, rounding_mode=None):
    q = f"({a} / {b})"
    if rounding_mode == "floor":
        return f"tl.floor{q}"
    if rounding_mode == "trunc":
        return f"tl.where({q} < 0, tl.ceil{q}, tl.floor{q})"
    return q


def _div_tilelang(a, b, rounding_mode=None):
    q = f"({a} / {b})"
    return {None: q, "trunc": f"T.trunc{q}", "floor": f"T.floor{q}"}[rounding_mode]


def _erf_triton(z: str) -> str:
    """Abramowitz-Stegun 7.1.26 with the sign restored: erf(-z) = -erf(z)."""
    t = f"(1.0 / (1.0 + 0.3275911 * tl.abs({z})))"
    poly = (f"((((1.061405429 * {t} - 1.453152027) * {t} + 1.421413741) * {t}"
            f" - 0.284496736) * {t} + 0.254829592) * {t}")
    y = f"(1.0 - {poly} * tl.exp(-({z}) * ({z})))"
    return f"({y} * tl.where({z} < 0, -1.0, 1.0))"


def _gelu(backend: str):
    def render(a, approximate="none"):
        if approximate == "tanh":
            inner = f"{SQRT_2_OVER_PI} * ({a} + 0.044715 * {a} * {a} * {a})"
            tanh = {"reference": f"np.tanh({inner})", "triton": f"(2.0 * tl.sigmoid(2.0 * ({inner})) - 1.0)",
                    "tilelang": f"T.tanh({inner})"}[backend]
            return f"(0.5 * {a} * (1.0 + {tanh}))"
        z = f"({a} * {SQRT_HALF})"
        erf = {"reference": f"erf({z})", "triton": _erf_triton(z), "tilelang": f"T.erf({z})"}[backend]
        return f"(0.5 * {a} * (1.0 + {erf}))"
    return render


def _pow_triton(a, b):
    """C99 / torch ``pow`` special cases: x**0 == 1 and 1**y == 1 (NaN included),
    (-1)**+-inf == 1, signed zeros and infinities, negative base with an integer exponent."""
    if is_scalar(b) and not is_scalar(a):
        ones = "tl.where({a} == {a}, 1.0, 1.0)"  # 1.0 shaped like a, NaN included
        # torch computes x ** 0.5 / x ** -0.5 as sqrt / rsqrt (pow(-inf, 0.5) is nan there)
        small = {0: ones, 1: "{a}", 2: "({a} * {a})", 3: "({a} * {a} * {a})", 0.5: "tl.sqrt({a})",
                 -1: "(1.0 / {a})", -0.5: "(1.0 / tl.sqrt({a}))"}
        if b in small:
            return small[b].format(a=a)
    if is_scalar(a) and a > 0:  # scalar ** tensor: the log is a constant
        if a == 1:
            return f"tl.where({b} == {b}, 1.0, 1.0)"
        return f"tl.exp2({b} * {math.log2(a)!r})"
    mag = f"tl.exp2({b} * tl.log2(tl.abs({a}) + 0.0))"
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
    one = f"((({b}) == 0) | (({a}) == 1) | ((({a}) == -1) & (tl.abs({b}) == float('inf'))))"
    return f"tl.where({one}, 1.0, {value})"


def _clamp(lo_fn, hi_fn, suffix: str = ""):
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


def _clamp_ref(a, min=None, max=None):
    # clamp keeps the input on ties (clamp(-0.0, min=0.0) is -0.0) and propagates NaN.
    out = a
    if min is not None:
        out = f"_pick({out}, {min}, {out} < {min})"
    if max is not None:
        out = f"_pick({out}, {max}, {out} > {max})"
    return out


def _cast(backend: str):
    def render(a, dtype):
        if backend == "reference":
            return f"np.asarray({a}).astype(np.{'bool_' if dtype == 'bool' else dtype})" \
                if dtype != "bfloat16" else f"np.asarray({a})"
        if backend == "triton":
            return f"{a}.to(tl.{'int1' if dtype == 'bool' else dtype})"
        return f"T.Cast({dtype!r}, {a})"
    return render


NAN_ALL = ", propagate_nan=tl.PropagateNan.ALL"
# TIR's max / min / fabs lower to C's NaN-dropping fmax / fmin (and fabs is missing on the
# C target): spell eager's NaN-propagating forms out.
TL_ABS = "T.if_then_else({a} < 0, -{a}, T.if_then_else({a} == 0, 0.0, {a}))"


def _tl_keep(op: str):
    """TileLang clamp bound that keeps the input on a tie (clamp(-0.0, min=0.0) is -0.0 in
    eager; T.max gives 0.0) and propagates a NaN bound."""
    def render(a, bound):
        return (f"T.if_then_else(T.isnan({bound}), {bound}, "
                f"T.if_then_else({a} {op} {bound}, {bound}, {a}))")
    return render


def _tl_nan(fn: str):
    def render(a, b):
        return f"T.if_then_else(T.isnan({a}), {a}, T.if_then_else(T.isnan({b}), {b}, {fn}({a}, {b})))"
    return render


# ----------------------------------------------------------------------------- records

def _spell(name: str, fn: bool = True, method: bool = True, nn: bool = False,
           op: str = "", extra: tuple = ()) -> tuple:
    out = []
    if fn:
        out += [f"tensorplay:{name}", f"torch:{name}"]
    if method:
        out.append(f"method:{name}")
    if nn:
        out += [f"tensorplay.nn.functional:{name}", f"torch.nn.functional:{name}"]
    if op:
        out.append(f"operator:{op}")
    return tuple(out) + tuple(extra)


def unary(a): ...
def binary(a, b): ...


def _record(name, signature, meta, spellings, ref, triton, tilelang, **kw):
    return register(Prim(name=name, kind="pointwise", signature=signature, meta=meta,
                         spellings=spellings, lowerings={"reference": ref, "triton": triton,
                                                         "tilelang": tilelang}, **kw))


def _unary(name, ref, triton, tilelang, meta=floating, compute="result", **spell):
    return _record(name, unary, meta, _spell(name, **spell), ref, triton, tilelang, compute=compute)


def _binary(name, ref, triton, tilelang, meta=promoted, compute="result", **spell):
    return _record(name, binary, meta, _spell(name, **spell), ref, triton, tilelang,
                   aliases={"other": "b", "exponent": "b"}, compute=compute)


def add(a, b, alpha=1): ...
def sub(a, b, alpha=1): ...
def div(a, b, rounding_mode=None): ...
def where(cond, a, b): ...
def clamp(a, min=None, max=None): ...
def gelu(a, approximate="none"): ...
def cast(a, dtype): ...


_record("add", add, lambda a, b, alpha=1: promoted(a, b), _spell("add", op="add"),
        _add_ref("+"), _add_tpl("+"), _add_tpl("+"), aliases={"other": "b"})
_record("sub", sub, lambda a, b, alpha=1: left_scalar_as_tensor(a, b), _spell("sub", op="sub", extra=("torch:subtract",)),
        _add_ref("-"), _add_tpl("-"), _add_tpl("-"), aliases={"other": "b"})
_binary("mul", "({a} * {b})", "({a} * {b})", "({a} * {b})", op="mul", extra=("torch:multiply",))
_record("div", div, div_meta, _spell("div", op="truediv", extra=("tensorplay:true_divide", "torch:true_divide",
        "method:true_divide", "torch:divide")), _div_ref, _div_triton, _div_tilelang,
        aliases={"other": "b"})
_unary("neg", "(-{a})", "(-{a})", "(-{a})", meta=same_dtype, op="neg",
       extra=("tensorplay:negative", "torch:negative", "method:negative"))
_unary("abs", "np.abs({a})", "tl.abs({a})", TL_ABS, meta=same_dtype, op="abs")
_unary("exp", "np.exp({a})", "tl.exp({a})", "T.exp({a})")
_unary("exp2", "np.exp2({a})", "tl.exp2({a})", "T.exp2({a})")
_unary("log", "np.log({a})", "tl.log({a})", "T.log({a})")
_unary("log2", "np.log2({a})", "tl.log2({a})", "T.log2({a})")
_unary("sqrt", "np.sqrt({a})", "tl.sqrt({a})", "T.sqrt({a})")
_unary("rsqrt", "(1.0 / np.sqrt({a}))", "tl.rsqrt({a})", "T.rsqrt({a})")
_unary("sin", "np.sin({a})", "tl.sin({a})", "T.sin({a})")
_unary("cos", "np.cos({a})", "tl.cos({a})", "T.cos({a})")
_unary("tanh", "np.tanh({a})", "(2.0 * tl.sigmoid(2.0 * {a}) - 1.0)", "T.tanh({a})", nn=True)
_unary("sigmoid", "(1.0 / (1.0 + np.exp(-{a})))", "tl.sigmoid({a})", "T.sigmoid({a})", nn=True)
_unary("relu", "_pick({a}, 0, {a} < 0)", "tl.where({a} < 0, 0, {a})", "T.if_then_else({a} < 0, 0.0, {a})",
       meta=same_dtype, nn=True)
_unary("silu", "({a} / (1.0 + np.exp(-{a})))", "({a} * tl.sigmoid({a}))", "({a} * T.sigmoid({a}))", nn=True)
_record("gelu", gelu, lambda a, approximate="none": floating(a), _spell("gelu", nn=True),
        _gelu("reference"), _gelu("triton"), _gelu("tilelang"))
def _pow_ref(a, b, framework="torch"):
    """TensorPlay's ``int_x ** int_y`` goes through float64; ``int_x ** 3`` is exact (wraps)."""
    tensor_exponent = not (is_scalar(b) or str(b).startswith("_scalar("))
    return f"_pow({a}, {b}, {framework if tensor_exponent else 'torch'!r})"


_binary("pow", _pow_ref, _pow_triton, "T.pow({a}, {b})", meta=left_scalar_as_tensor, op="pow")
def _minimum_ref(a, b, framework="torch"):
    # On a tie (0.0 vs -0.0) TensorPlay keeps the second operand (measured); torch's pick
    # depends on the size (scalar vs vectorised loop), so NumPy's is as good as any.
    return f"_pick({b}, {a}, {a} < {b})" if framework == "tensorplay" else f"np.minimum({a}, {b})"


def _maximum_ref(a, b, framework="torch"):
    return f"_pick({a}, {b}, {b} > {a})" if framework == "tensorplay" else f"np.maximum({a}, {b})"


_binary("maximum", _maximum_ref, "tl.maximum({a}, {b}" + NAN_ALL + ")", _tl_nan("T.max"))
_binary("minimum", _minimum_ref, "tl.minimum({a}, {b}" + NAN_ALL + ")", _tl_nan("T.min"))
_record("where", where, where_meta, _spell("where"), "np.where({cond}, {a}, {b})",
        "tl.where({cond}, {a}, {b})", "T.if_then_else({cond}, {a}, {b})",
        aliases={"condition": "cond", "input": "a", "self": "a", "other": "b"})
_record("clamp", clamp, clamp_meta, _spell("clamp", extra=("tensorplay:clip", "torch:clip", "method:clip")),
        _clamp_ref, _clamp("tl.maximum", "tl.minimum", NAN_ALL),
        _clamp(_tl_keep("<"), _tl_keep(">")))

_COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
for _name, _sym in _COMPARISONS.items():
    _binary(_name, f"({{a}} {_sym} {{b}})", f"({{a}} {_sym} {{b}})", f"({{a}} {_sym} {{b}})",
            meta=boolean, op=_name, compute="promoted")

_LOGICAL = {"and": ("np.logical_and", "&", "T.And"), "or": ("np.logical_or", "|", "T.Or"),
            "xor": ("np.logical_xor", "^", None)}
for _name, (_np, _sym, _tl) in _LOGICAL.items():
    _tile = f"{_tl}({{a}} != 0, {{b}} != 0)" if _tl else "(({a} != 0) != ({b} != 0))"
    _binary(f"logical_{_name}", f"{_np}({{a}}, {{b}})", f"(({{a}} != 0) {_sym} ({{b}} != 0))", _tile,
            meta=boolean, compute="none")
_unary("logical_not", "np.logical_not({a})", "({a} == 0)", "({a} == 0)", meta=lambda a: boolean(a),
       compute="none")


def _method_cast(dtype: str):
    return lambda args, kwargs: {"a": args[0], "dtype": dtype}


def _is_dtype(value: Any) -> bool:
    return type(value).__name__ in ("dtype", "DType")


def _to_adapter(args: tuple, kwargs: dict) -> Any:
    """x.to(dtype) / x.to("cpu", dtype) / x.to(dtype=...); a device move is not a cast."""
    rest = list(args[1:]) + [v for k, v in kwargs.items() if k in ("dtype", "device")]
    dtypes = [v for v in rest if _is_dtype(v)]
    others = [v for v in rest if not _is_dtype(v) and v is not None]
    if len(dtypes) != 1 or others:
        return None
    return {"a": args[0], "dtype": dtypes[0]}


_CAST_METHODS = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
                 "int": "int32", "long": "int64", "short": "int16", "bool": "bool", "char": "int8",
                 "byte": "uint8"}
_record("cast", cast, cast_meta,
        ("method:to", "method:type") + tuple(f"method:{m}" for m in _CAST_METHODS),
        _cast("reference"), _cast("triton"), _cast("tilelang"), compute="none",
        adapters={"method:to": _to_adapter, "method:type": _to_adapter,
                  **{f"method:{m}": _method_cast(d) for m, d in _CAST_METHODS.items()}})
