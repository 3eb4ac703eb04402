"""VJP rules of the row prims: softmax, log_softmax, layer_norm, rms_norm.

Registered by :mod:`.vjps` (which attaches every rule once all are known); see its docstring
for what a rule is.
"""

from __future__ import annotations

import math

from .vjp_registry import is_node as _is_node, rule


def _softmax_dim(e, a, dim):
    from .norms import implicit_softmax_dim
    return implicit_softmax_dim(len(e.shape(a))) if dim is None else dim


@rule("softmax")
def _softmax(e, g, out, a, dim=None, dtype=None):
    dim = _softmax_dim(e, a, dim)
    y, g = e.upcast(out), e.upcast(g)
    gy = e.mul(g, y)
    return {"a": e.sub(gy, e.mul(y, e.sum(gy, [dim], True)))}


@rule("log_softmax")
def _log_softmax(e, g, out, a, dim=None, dtype=None):
    dim = _softmax_dim(e, a, dim)
    y, g = e.upcast(out), e.upcast(g)
    return {"a": e.sub(g, e.mul(e.exp(y), e.sum(g, [dim], True)))}


def _norm_dims(e, a, normalized_shape):
    k = 1 if isinstance(normalized_shape, int) else len(tuple(normalized_shape))
    n = len(e.shape(a))
    return list(range(n - k, n))


@rule("layer_norm")
def _layer_norm(e, g, out, a, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = _norm_dims(e, a, normalized_shape)
    x, g = e.upcast(a), e.upcast(g)
    centered = e.sub(x, e.mean(x, dims, True))
    rstd = e.rsqrt(e.add(e.mean(e.mul(centered, centered), dims, True), float(eps)))
    xhat = e.mul(centered, rstd)
    gx = e.mul(g, e.upcast(weight)) if _is_node(weight) else g
    # torch's CUDA kernel's order: ((gx - mean(gx)) - xhat * mean(gx * xhat)) * rstd
    ga = e.mul(e.sub(e.sub(gx, e.mean(gx, dims, True)),
                     e.mul(xhat, e.mean(e.mul(gx, xhat), dims, True))), rstd)
    if e.framework == "torch" and getattr(e.meta(a), "device_type", None) == "cpu":
        ga = layer_norm_special_rows_cpu(e, ga, gx, x, e.mean(x, dims, True), rstd, dims)
    return {"a": ga, "weight": e.mul(g, xhat) if _is_node(weight) else None,
            "bias": g if _is_node(bias) else None}


def layer_norm_special_rows_cpu(e, ga, gx, x, mean, rstd, dims):
    """``ga`` where a row's sums are finite, else torch's CPU kernel's formula
    (``layer_norm_kernel.cpp``): ``rstd * gx + b * x + c`` with ``b = (sum(gx) * mean -
    sum(gx * x)) * rstd**3 / n``, ``c = -b * mean - sum(gx) * rstd / n``. Where ``gx`` holds an
    infinity (an infinite weight) the CPU and CUDA orders place NaN and +-inf differently
    (grad fuzz seed 99998492: CPU eager all NaN, the CUDA order -inf in three places); in
    finite rows the CPU formula cancels (``b * x + c``) and its rounding follows eager's saved
    statistics bit for bit, which ours do not (seed 99998405): there the centered form stays.
    ``e`` emits the ops: the backward graph's emitter here, torch itself for AOTAutograd's
    decomposition (``training/decompositions.py``)."""
    n = math.prod(e.shape(x)[d] for d in dims)
    scale = 1.0 / n if n else 0.0  # n == 0: no element to compute
    db, ds = e.sum(gx, dims, True), e.sum(e.mul(gx, x), dims, True)
    b = e.mul(e.mul(e.mul(e.mul(e.sub(e.mul(db, mean), ds), rstd), rstd), rstd), scale)
    c = e.sub(e.mul(e.neg(b), mean), e.mul(e.mul(db, rstd), scale))
    special = e.add(e.add(e.mul(rstd, gx), e.mul(b, x)), c)
    finite = e.logical_and(e.eq(e.sub(db, db), 0.0), e.eq(e.sub(ds, ds), 0.0))
    return e.where(finite, ga, special)


_EPS = {"float16": 0.0009765625, "bfloat16": 0.0078125, "float32": 1.1920928955078125e-07,
        "float64": 2.220446049250313e-16}


@rule("rms_norm")
def _rms_norm(e, g, out, a, normalized_shape, weight=None, eps=None):
    dims = _norm_dims(e, a, normalized_shape)
    eps = _EPS.get(e.dtype(a), 1e-6) if eps is None else eps
    x, g = e.upcast(a), e.upcast(g)
    rstd = e.rsqrt(e.add(e.mean(e.mul(x, x), dims, True), float(eps)))
    xhat = e.mul(x, rstd)
    gx = e.mul(g, e.upcast(weight)) if _is_node(weight) else g
    ga = e.mul(e.sub(gx, e.mul(xhat, e.mean(e.mul(gx, xhat), dims, True))), rstd)
    return {"a": ga, "weight": e.mul(g, xhat) if _is_node(weight) else None}
