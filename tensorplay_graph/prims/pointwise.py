"""Pointwise prims: arithmetic, transcendental, activations, comparisons, logic, casts.

One keyword record per prim: spellings, meta rule, and three lowering templates
(``reference``, ``triton``, ``tilelang``; defined in ``pointwise_lowerings.py``, with the
``declines`` checks some backends apply beside their template).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir.meta import TensorMeta, tensor_meta_of
from . import register
from . import extremum_ties as ties
from . import pointwise_declines as dec
from . import pointwise_lowerings as low
from .record import Prim
from .reference_math import NAMESPACE as _REFERENCE_HELPERS
from .rules import (broadcast_shapes, current_framework, device_of, is_meta, is_scalar,
                    require_meta, result_type, tensor_operands, to_floating)

_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _erf(z):
    """``erf`` rounded to ``z``'s float dtype, as eager's float32 ``erf`` returns: gelu's
    ``1 + erf(x / sqrt(2))`` then cancels to 0 below about -5.6 as it does in eager."""
    z = np.asarray(z)
    return _ERF(z).astype(z.dtype if z.dtype.kind == "f" else np.float64)


REFERENCE_NAMESPACE = {"np": np, "erf": _erf, **_REFERENCE_HELPERS}
#: Canonical parameters that are a pointwise prim's numeric operands (converted by backends).
OPERANDS = ("a", "b", "min", "max")


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
    framework = current_framework()
    if dec.tensorplay_scalar_bounds(min, max, framework) or (
            framework == "tensorplay" and not any(is_meta(b) for b in (min, max))):
        # TensorPlay's clamp casts Python-number bounds, and one-element tensor bounds, to the
        # input's dtype: the input's shape and dtype (clamp(int64, -1.0, 2.0) is int64, seed
        # 60005243; clamp(int32 (2,), float32 (1, 1)) is int32 (2,)), never a promotion.
        a = require_meta(a, "clamp", "a")
        return TensorMeta(a.shape, a.dtype, a.device, requires_grad=a.requires_grad)
    return _pointwise_meta((a, min, max), result_type(a, *(v for v in (min, max) if v is not None)))


def cast_meta(a, dtype):
    a = require_meta(a, "cast", "a")
    return TensorMeta(a.shape, dtype or a.dtype, a.device, requires_grad=a.requires_grad)



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
def add(a, b, alpha=1): ...
def sub(a, b, alpha=1): ...
def div(a, b, rounding_mode=None): ...
def where(cond, a, b): ...
def clamp(a, min=None, max=None): ...
def gelu(a, approximate="none"): ...
def cast(a, dtype): ...


def _record(name, *, signature, meta, spellings, reference, triton, tilelang,
            reference_float64=None, triton_integer=None, triton_float64=None, **kw):
    lowerings = {"reference": reference, "triton": triton, "tilelang": tilelang}
    if reference_float64 is not None:  # float32 operands computed in float64 (record.TRAITS)
        lowerings["reference_float64"] = reference_float64
    if triton_integer is not None:  # the template for integer operands (exact arithmetic)
        lowerings["triton_integer"] = triton_integer
    if triton_float64 is not None:  # the template for a float64 result (libdevice's routines
        lowerings["triton_float64"] = triton_float64  # take operands of one dtype)
    return register(Prim(name=name, kind="pointwise", signature=signature, meta=meta,
                         spellings=spellings, lowerings=lowerings, **kw))


#: exp(-x) as eager's float32 exp gives it inside sigmoid / silu computed in float64: inf past
#: float32's range (sigmoid(-88.7228394) is 0.0 in both frameworks, not the 2.9e-39 float64
#: rounds to; log(sigmoid(-100)) is -inf, not -99.98: TensorPlay seed 73001389).
_EXP32_NEG = "np.where(-{a} > 88.72283172607422, np.inf, np.exp(-{a}))"


def _unary(name, *, reference, triton, tilelang, meta=floating, spell=None, **kw):
    return _record(name, signature=unary, meta=meta, spellings=_spell(name, **(spell or {})),
                   reference=reference, triton=triton, tilelang=tilelang, **kw)


def _binary(name, *, reference, triton, tilelang, meta=promoted, spell=None, **kw):
    return _record(name, signature=binary, meta=meta, spellings=_spell(name, **(spell or {})),
                   reference=reference, triton=triton, tilelang=tilelang,
                   aliases={"other": "b", "exponent": "b"}, **kw)


_TRANSCENDENTAL = frozenset({"transcendental", "float64_reference"})
_SELF_CONSTANT = frozenset({"self_constant"})

# arithmetic
_record("add", signature=add, meta=lambda a, b, alpha=1: promoted(a, b), spellings=_spell("add", op="add"),
        reference=low.add_ref("+"), triton=low.add_tpl("+"), tilelang=low.add_tpl("+"),
        aliases={"other": "b"}, declines={"reference": dec.add_reference_declines})
_record("sub", signature=sub, meta=lambda a, b, alpha=1: left_scalar_as_tensor(a, b),
        spellings=_spell("sub", op="sub", extra=("torch:subtract",)),
        reference=low.add_ref("-"), triton=low.add_tpl("-"), tilelang=low.add_tpl("-"),
        aliases={"other": "b"}, declines={"reference": dec.add_reference_declines},
        traits=_SELF_CONSTANT)
_binary("mul", reference="({a} * {b})", triton="({a} * {b})", tilelang="({a} * {b})",
        spell={"op": "mul", "extra": ("torch:multiply",)},
        declines={"tilelang": dec.mul_tilelang_declines}, traits={"torch_opmath_scalar"})
_record("div", signature=div, meta=div_meta,
        spellings=_spell("div", op="truediv", extra=("tensorplay:true_divide", "torch:true_divide",
                                                     "method:true_divide", "torch:divide")),
        reference=low.div_ref, triton=low.div_triton, tilelang=low.div_tilelang, aliases={"other": "b"},
        triton_integer=low.div_triton_integer, triton_float64=low.div_triton_float64,
        declines={"triton": dec.div_floor_declines, "tilelang": dec.div_tilelang_declines},
        traits={"self_constant", "torch_opmath_scalar"})
# Triton 3.6 compiles a float ``-x`` as ``0 - x`` for a GPU: -(+0.0) came out +0.0 (H200,
# benchmarks/triton_special_values_gpu.py); ``x * -1.0`` flips the sign bit.
_unary("neg", reference="(-{a})", triton="({a} * -1.0)", triton_integer="(-{a})",
       tilelang="(-{a})", meta=same_dtype,
       spell={"op": "neg", "extra": ("tensorplay:negative", "torch:negative", "method:negative")})
_unary("abs", reference="np.abs({a})", triton="tl.abs({a})", tilelang=low.TL_ABS, meta=same_dtype,
       spell={"op": "abs"})
_binary("pow", reference=low.pow_ref, triton=low.pow_triton, tilelang="T.pow({a}, {b})",
        triton_float64=low.pow_triton_float64,
        meta=left_scalar_as_tensor, spell={"op": "pow"},
        declines={"triton": dec.pow_triton_declines},
        traits={"transcendental", "tensorplay_opmath_scalar"})
_EXTREMUM_DECLINES = {"reference": ties.extremum_reference_declines,
                      "triton": ties.extremum_triton_declines}
_binary("maximum", reference=ties.maximum_ref, triton=ties.maximum_triton,
        tilelang=low.tl_nan("T.max"), declines=_EXTREMUM_DECLINES)
_binary("minimum", reference=ties.minimum_ref, triton=ties.minimum_triton,
        tilelang=low.tl_nan("T.min"), declines=_EXTREMUM_DECLINES)
_record("where", signature=where, meta=where_meta, spellings=_spell("where"),
        reference="np.where({cond}, {a}, {b})", triton="tl.where({cond}, {a}, {b})",
        tilelang="T.if_then_else({cond}, {a}, {b})",
        aliases={"condition": "cond", "input": "a", "self": "a", "other": "b"})


def _tensorplay_clip(args: tuple, kwargs: dict) -> Any:
    """TensorPlay 1.0.0's ``clip`` of a bool / integer tensor clamps in a wider type and casts
    the result (bool ``clip(False, -1.5)`` is False, uint8 ``clip(x, 300)`` is 44); its ``clamp``,
    which this prim models, casts the bounds first (``clamp(False, -1.5)`` is True). Such a clip,
    or one of unknown dtype, stays an eager call. Floating clips equal clamps (measured)."""
    bound = {**dict(zip(("a", "min", "max"), args)), **kwargs}
    meta = tensor_meta_of(bound.get("a", bound.get("input", bound.get("self"))))
    return bound if meta is not None and meta.is_floating else None


_record("clamp", signature=clamp, meta=clamp_meta,
        spellings=_spell("clamp", extra=("tensorplay:clip", "torch:clip", "method:clip")),
        adapters={"tensorplay:clip": _tensorplay_clip, "tensorplay.method:clip": _tensorplay_clip},
        reference=low.clamp_ref, triton=low.clamp_triton,
        tilelang=low.clamp(low.tl_keep("<"), low.tl_keep(">")),
        declines={"tilelang": dec.clamp_tilelang_declines,
                  "reference": dec.clamp_scalar_bounds_declines,
                  "triton": dec.clamp_kernel_declines})

# transcendental and activations
_unary("exp", reference="np.exp({a})", triton="tl.exp({a})", tilelang="T.exp({a})",
       traits=_TRANSCENDENTAL)
_unary("exp2", reference="np.exp2({a})", triton="tl.exp2({a})", tilelang="T.exp2({a})",
       traits=_TRANSCENDENTAL)
_unary("log", reference="np.log({a})", triton="tl.log({a})", tilelang="T.log({a})",
       traits=_TRANSCENDENTAL)
_unary("log2", reference="np.log2({a})", triton="tl.log2({a})", tilelang="T.log2({a})",
       traits=_TRANSCENDENTAL)
_unary("sqrt", reference="np.sqrt({a})", triton="tl.sqrt({a})", tilelang="T.sqrt({a})")
_unary("rsqrt", reference="(1.0 / np.sqrt({a}))", triton="tl.rsqrt({a})", tilelang="T.rsqrt({a})",
       traits={"float64_reference"})
_unary("sin", reference="np.sin({a})", triton="tl.sin({a})", tilelang="T.sin({a})",
       traits=_TRANSCENDENTAL)
_unary("cos", reference="np.cos({a})", triton="tl.cos({a})", tilelang="T.cos({a})",
       traits=_TRANSCENDENTAL)
_unary("tanh", reference="np.tanh({a})", triton="(2.0 * tl.sigmoid(2.0 * {a}) - 1.0)",
       tilelang="T.tanh({a})", spell={"nn": True}, traits=_TRANSCENDENTAL)
_unary("sigmoid", reference="(1.0 / (1.0 + np.exp(-{a})))", triton="tl.sigmoid({a})",
       tilelang="T.sigmoid({a})", spell={"nn": True}, traits=_TRANSCENDENTAL,
       reference_float64=f"(1.0 / (1.0 + {_EXP32_NEG}))")
_unary("relu", reference="_pick({a}, 0, {a} < 0)", triton=low.relu_triton,
       tilelang="T.if_then_else({a} < 0, 0.0, {a})", meta=same_dtype, spell={"nn": True})
_unary("silu", reference="({a} / (1.0 + np.exp(-{a})))", triton="({a} * tl.sigmoid({a}))",
       tilelang="({a} * T.sigmoid({a}))", spell={"nn": True}, traits=_TRANSCENDENTAL,
       reference_float64=f"({{a}} / (1.0 + {_EXP32_NEG}))")
_record("gelu", signature=gelu, meta=lambda a, approximate="none": floating(a),
        spellings=_spell("gelu", nn=True), reference=low.gelu("reference"),
        # Not float64_reference: eager's float32 1 + erf(x / sqrt(2)) cancels to 0 below about
        # -5.6 (gelu(-6) is -0.0), which a correctly rounded result (-6e-9) would not match.
        triton=low.gelu("triton"), tilelang=low.gelu("tilelang"), traits={"transcendental"},
        declines={"reference": dec.gelu_reference_declines, "triton": dec.gelu_triton_declines})

# comparisons and logic
_COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
for _name, _sym in _COMPARISONS.items():
    _expr = f"({{a}} {_sym} {{b}})"
    _binary(_name, reference=_expr, triton=_expr, tilelang=_expr, meta=boolean,
            spell={"op": _name}, compute="promoted", traits=_SELF_CONSTANT)

# Triton: selects and !=, not & | ^: the interpreter cannot combine an int1 block with a 0-d
# int1 (a loaded scalar; numpy bitwise_and TypeError, seed 20001370)
_LOGICAL = {"and": ("np.logical_and", "tl.where({a} != 0, {b} != 0, False)", "T.And"),
            "or": ("np.logical_or", "tl.where({a} != 0, True, {b} != 0)", "T.Or"),
            "xor": ("np.logical_xor", "(({a} != 0) != ({b} != 0))", None)}
for _name, (_np, _triton, _tl) in _LOGICAL.items():
    _binary(f"logical_{_name}", reference=f"{_np}({{a}}, {{b}})", triton=_triton,
            tilelang=f"{_tl}({{a}} != 0, {{b}} != 0)" if _tl else "(({a} != 0) != ({b} != 0))",
            meta=boolean, compute="none", traits=_SELF_CONSTANT if _name == "xor" else ())
_unary("logical_not", reference="np.logical_not({a})", triton="({a} == 0)", tilelang="({a} == 0)",
       meta=lambda a: boolean(a), compute="none")


# casts
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
_record("cast", signature=cast, meta=cast_meta,
        spellings=("method:to", "method:type") + tuple(f"method:{m}" for m in _CAST_METHODS),
        reference=low.cast("reference"), triton=low.cast("triton"), tilelang=low.cast("tilelang"),
        compute="none", adapters={"method:to": _to_adapter, "method:type": _to_adapter,
                                  **{f"method:{m}": _method_cast(d) for m, d in _CAST_METHODS.items()}})
