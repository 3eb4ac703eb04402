"""Reverse-mode (VJP) rules, one per differentiable prim, attached to the prim records.

A rule is ``rule(e, g, out, **prim_args) -> {argument name: gradient}``: ``e`` is the
:class:`~tensorplay_graph.prims.emit.Emitter` (every ``e.<prim>(...)`` appends a prim
call, so the backward graph is made of prims and fuses like any program), ``g`` the
gradient of the output ``out``, ``prim_args`` the call's canonical arguments (graph nodes
for tensors). A rule returns gradients in any dtype and any broadcast shape: the caller
sums each over its broadcast dims and casts it to its input's dtype. An argument left out
(or ``None``) gets no gradient; ``OPAQUE`` hands the node to the framework's own autograd
(kept as one opaque node); raising ``NotDifferentiable`` makes the graph train through
eager autograd, with the reason shown by ``explain()``.

Comparisons, logical ops and integer results carry no gradient and need no rule.
"""

from __future__ import annotations

import math

from ..ir.meta import tensor_meta_of
from .emit import NotDifferentiable, reduced_dims
from .vjp_registry import attach, rule
from .vjp_registry import is_node as _is_node

LN2 = math.log(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
def _zero_gradient(e, g):
    """Eager's gradient of a locally constant op: a tensor of exact zeros (not None, so
    ``.grad`` is a tensor as in eager; zeros even where ``g`` is inf / NaN)."""
    return e.where(e.ne(g, g), 0.0, 0.0)


# ----------------------------------------------------------------------------- arithmetic

@rule("add", "sub")
def _add(e, g, out, a, b, alpha=1):
    gb = g if alpha == 1 else e.mul(g, alpha)
    if out.meta["prim"].name == "sub":
        gb = e.neg(gb)
    return {"a": g, "b": gb}


@rule("mul")
def _mul(e, g, out, a, b):
    return {"a": e.mul(g, b) if _is_node(a) else None, "b": e.mul(g, a) if _is_node(b) else None}


@rule("div")
def _div(e, g, out, a, b, rounding_mode=None):
    if rounding_mode is not None:  # piecewise constant
        zero = _zero_gradient(e, g)
        return {"a": zero if _is_node(a) else None, "b": zero if _is_node(b) else None}
    ga = e.div(g, b) if _is_node(a) else None
    gb = e.neg(e.div(e.mul(g, out), b)) if _is_node(b) else None
    return {"a": ga, "b": gb}


@rule("neg")
def _neg(e, g, out, a):
    return {"a": e.neg(g)}


@rule("abs")
def _abs(e, g, out, a):
    # both frameworks: ``g * sgn(a)``: at a zero or NaN ``a`` that is ``g * 0`` (NaN for a NaN
    # or infinite ``g``: grad fuzz seeds 99998563, torch; 100400213, TensorPlay's sqrt(|x|))
    return {"a": e.where(e.gt(a, 0), g, e.where(e.lt(a, 0), e.neg(g), e.mul(g, 0.0)))}


@rule("pow")
def _pow(e, g, out, a, b):
    grads = {}
    if _is_node(a):
        if _is_node(b):
            base = e.mul(e.mul(g, b), e.pow(a, e.sub(b, 1.0)))
            # torch defines it as 0 where b == 0 (0 * 0**-1 would be NaN); TensorPlay does not
            grads["a"] = e.where(e.eq(b, 0), 0.0, base) if e.framework == "torch" else base
        elif b == 0 and e.framework == "torch":
            # torch's pow_backward returns zeros for a 0 exponent; TensorPlay computes
            # 0 * a**-1, NaN where a is 0 or NaN (fuzz seed 101310153)
            grads["a"] = _zero_gradient(e, g)
        else:
            power = e.pow(a, b - 1) if b - 1 != 1 else a
            grads["a"] = e.mul(e.mul(g, power), float(b))
    if _is_node(b) and _is_node(a):
        # d/db a**b = a**b * log(a); eager defines it as 0 where a == 0 and b >= 0.
        zero_base = e.logical_and(e.eq(a, 0), e.ge(b, 0))
        grads["b"] = e.where(zero_base, 0.0, e.mul(e.mul(g, out), e.log(a)))
    elif _is_node(b):
        if a <= 0:
            raise NotDifferentiable(f"pow with base {a} <= 0 has no real log")
        grads["b"] = e.mul(e.mul(g, out), math.log(a))
    return grads


@rule("maximum", "minimum")
def _extremum(e, g, out, a, b):
    if not (_is_node(a) and _is_node(b)):
        raise NotDifferentiable("maximum / minimum of a scalar")
    pick = e.gt if out.meta["prim"].name == "maximum" else e.lt
    half = e.mul(g, 0.5)  # eager splits the gradient evenly on ties
    if e.framework == "torch":
        # torch masks out the side that loses: next to a NaN neither loses, both get g
        return {"a": e.where(e.eq(a, b), half, e.where(pick(b, a), 0.0, g)),
                "b": e.where(e.eq(a, b), half, e.where(pick(a, b), 0.0, g))}
    # TensorPlay passes g to the side that wins: next to a NaN neither wins
    return {"a": e.where(pick(a, b), g, e.where(e.eq(a, b), half, 0.0)),
            "b": e.where(pick(b, a), g, e.where(e.eq(a, b), half, 0.0))}


@rule("where")
def _where(e, g, out, cond, a, b):
    return {"a": e.where(cond, g, 0.0) if _is_node(a) else None,
            "b": e.where(cond, 0.0, g) if _is_node(b) else None}


@rule("clamp")
def _clamp(e, g, out, a, min=None, max=None):
    if _is_node(min) or _is_node(max):
        raise NotDifferentiable("clamp with tensor bounds")
    mask = None
    # torch passes g where min <= a <= max; TensorPlay where a is not outside (NaN too)
    tests = ((min, e.ge), (max, e.le)) if e.framework == "torch" else ((min, e.lt), (max, e.gt))
    for bound, test in tests:
        if bound is not None:
            inside = test(a, bound) if e.framework == "torch" else e.logical_not(test(a, bound))
            mask = inside if mask is None else e.logical_and(mask, inside)
    return {"a": g if mask is None else e.where(mask, g, 0.0)}


@rule("cast")
def _cast(e, g, out, a, dtype):
    return {"a": g}


# ----------------------------------------------------------------------------- transcendental

@rule("exp")
def _exp(e, g, out, a):
    return {"a": e.mul(g, out)}


@rule("exp2")
def _exp2(e, g, out, a):
    return {"a": e.mul(e.mul(g, out), LN2)}


@rule("log", "log2")
def _log(e, g, out, a):
    return {"a": e.div(g, a if out.meta["prim"].name == "log" else e.mul(a, LN2))}


@rule("sqrt")
def _sqrt(e, g, out, a):
    return {"a": e.div(g, e.mul(out, 2.0))}


@rule("rsqrt")
def _rsqrt(e, g, out, a):
    return {"a": e.mul(e.mul(g, e.mul(e.mul(out, out), out)), -0.5)}


@rule("sin")
def _sin(e, g, out, a):
    return {"a": e.mul(g, e.cos(a))}


@rule("cos")
def _cos(e, g, out, a):
    return {"a": e.neg(e.mul(g, e.sin(a)))}


@rule("tanh")
def _tanh(e, g, out, a):
    t = e.upcast(out)
    return {"a": e.mul(e.upcast(g), e.rsub(1.0, e.mul(t, t)))}


@rule("sigmoid")
def _sigmoid(e, g, out, a):
    s = e.upcast(out)
    return {"a": e.mul(e.upcast(g), e.mul(s, e.rsub(1.0, s)))}


@rule("relu")
def _relu(e, g, out, a):
    # both frameworks zero the gradient where the output is <= 0 and pass it where the
    # output is NaN (``out > 0`` would drop it there: grad fuzz seed 86000021)
    return {"a": e.where(e.le(out, 0), 0.0, g)}


@rule("silu")
def _silu(e, g, out, a):
    x = e.upcast(a)
    s = e.sigmoid(x)
    return {"a": e.mul(e.upcast(g), e.mul(s, e.add(e.mul(x, e.rsub(1.0, s)), 1.0)))}


@rule("gelu")
def _gelu(e, g, out, a, approximate="none"):
    x, g = e.upcast(a), e.upcast(g)
    if approximate == "tanh":
        beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
        x_sq = e.mul(x, x)
        inner = e.mul(e.add(x, e.mul(e.mul(x_sq, x), kappa)), beta)
        t = e.tanh(inner)
        left = e.mul(e.add(t, 1.0), 0.5)
        dinner = e.mul(e.add(e.mul(x_sq, 3.0 * kappa), 1.0), beta)
        right = e.mul(e.mul(e.mul(x, 0.5), e.rsub(1.0, e.mul(t, t))), dinner)
        return {"a": e.mul(g, e.add(left, right))}
    # Phi(x) = gelu(x) / x (no erf prim; 0.5 at x == 0), phi(x) = exp(-x^2/2) / sqrt(2 pi)
    cdf = e.where(e.eq(x, 0), 0.5, e.div(e.gelu(x), x))
    pdf = e.mul(e.exp(e.mul(e.mul(x, x), -0.5)), INV_SQRT_2PI)
    return {"a": e.mul(g, e.add(cdf, e.mul(x, pdf)))}


# ----------------------------------------------------------------------------- reductions

@rule("sum")
def _sum(e, g, out, a, dim=None, keepdim=False, dtype=None):
    return {"a": e.expand_back(g, e.shape(a), dim, keepdim)}


@rule("mean")
def _mean(e, g, out, a, dim=None, keepdim=False, dtype=None):
    shape = e.shape(a)
    count = 1
    for d in reduced_dims(dim, len(shape)):
        count *= shape[d]
    return {"a": e.div(e.expand_back(g, shape, dim, keepdim), float(max(count, 1)))}


@rule("amax", "amin")
def _amax(e, g, out, a, dim=None, keepdim=False):
    shape = e.shape(a)
    # eager splits the gradient evenly between the tied extremes
    hit = e.cast(e.eq(a, e.expand_back(out, shape, dim, keepdim)), e.dtype(g))
    ties = e.sum(hit, reduced_dims(dim, len(shape)), True)
    share = e.div(e.expand_back(g, shape, dim, keepdim), e.expand(ties, shape))
    return {"a": e.mul(share, hit)}


@rule("var")
def _var(e, g, out, a, dim=None, correction=1, keepdim=False):
    shape = e.shape(a)
    dims = reduced_dims(dim, len(shape))
    count = 1
    for d in dims:
        count *= shape[d]
    centered = e.sub(a, e.mean(a, dims, True))
    scale = 2.0 / max(count - correction, 0) if count - correction > 0 else float("nan")
    return {"a": e.mul(e.mul(e.expand_back(g, shape, dim, keepdim), centered), scale)}


# ----------------------------------------------------------------------------- matmul

def _mT(e, x):
    n = len(e.shape(x))
    return e.transpose(x, n - 2, n - 1)


def _weight_grad(e, left, right):
    """``left^T @ right`` over all leading dims folded: (..., K)^T @ (..., N) -> (K, N)."""
    k, n = e.shape(left)[-1], e.shape(right)[-1]
    lead = e.shape(left)[:-1]
    # the folded size spelled out: ``-1`` is ambiguous when K or N is 0 (grad seed 88000707)
    m = math.prod(lead) if all(isinstance(d, int) for d in lead) else -1
    return e.matmul(e.transpose(e.reshape(left, (m, k)), 0, 1), e.reshape(right, (m, n)))


@rule("matmul")
def _matmul(e, g, out, a, b):
    na, nb = len(e.shape(a)), len(e.shape(b))
    if na == 1 and nb == 1:  # a dot product: g is 0-d
        return {"a": e.mul(b, g), "b": e.mul(a, g)}
    if na == 1:  # (k,) @ (..., k, n): a row vector; the gradient's batch dims are summed away
        a2, g2 = e.unsqueeze(a, 0), e.unsqueeze(g, -2)
        return {"a": e.squeeze(e.matmul(g2, _mT(e, b)), -2), "b": e.matmul(_mT(e, a2), g2)}
    if nb == 1:  # (..., m, k) @ (k,): a column vector
        b2, g2 = e.unsqueeze(b, -1), e.unsqueeze(g, -1)
        return {"a": e.matmul(g2, _mT(e, b2)), "b": e.squeeze(e.matmul(_mT(e, a), g2), -1)}
    ga = e.matmul(g, _mT(e, b))
    if nb == 2 and _column_major(b):
        # ``x @ W.t()``: b's gradient in b's own layout, as eager's mm backward gives it, so
        # W's is contiguous (its transpose as a strided copy: 0.48 ms for GPT-2's LM head)
        gb = _mT(e, _weight_grad(e, g, a))
    else:
        gb = _weight_grad(e, a, g) if nb == 2 else e.matmul(_mT(e, a), g)
    return {"a": ga, "b": gb}


def _column_major(x) -> bool:
    """A matrix laid out column by column (the transpose of a contiguous one), not also
    row-major (a row or a column)."""
    meta = tensor_meta_of(x)
    if meta is None or len(meta.shape) != 2 or min(meta.shape) < 2 or meta.stride is None:
        return False
    return tuple(meta.stride) == (1, meta.shape[0])


@rule("bmm")
def _bmm(e, g, out, a, b):
    return {"a": e.bmm(g, _mT(e, b)), "b": e.bmm(_mT(e, a), g)}


@rule("linear")
def _linear(e, g, out, a, weight, bias=None):
    if len(e.shape(weight)) != 2:
        raise NotDifferentiable("linear with a 1-D weight")
    return {"a": e.matmul(g, weight), "weight": _weight_grad(e, g, a),
            "bias": g if _is_node(bias) else None}


@rule("addmm")
def _addmm(e, g, out, c, a, b, beta=1, alpha=1):
    ga, gb = e.matmul(g, _mT(e, b)), e.matmul(_mT(e, a), g)
    if alpha != 1:
        ga, gb = e.mul(ga, alpha), e.mul(gb, alpha)
    return {"c": g if beta == 1 else e.mul(g, beta), "a": ga, "b": gb}


from . import vjps_norms  # noqa: E402,F401 - registers the row-norm rules
from . import vjps_views  # noqa: E402,F401 - registers the view and opaque-kind rules


attach()
