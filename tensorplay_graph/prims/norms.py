"""Row-wise fused patterns (kind ``norm``): softmax log_softmax layer_norm rms_norm.

Each normalises over trailing dims (``normalized_shape``) or one ``dim`` (the record's
``dims`` rule); the result has the input's shape. The ``triton`` lowering of each is a row
builder (see ``prims/lowering.py``).
"""

from __future__ import annotations

from typing import Any, Dict

from ..errors import ShapeError
from ..ir.meta import TensorMeta
from . import register
from .record import Prim
from .rules import require_floating, require_meta, wrap_dim


def softmax(a, dim=None, dtype=None): ...
def log_softmax(a, dim=None, dtype=None): ...
def layer_norm(a, normalized_shape, weight=None, bias=None, eps=1e-5): ...
def rms_norm(a, normalized_shape, weight=None, eps=None): ...


def implicit_softmax_dim(ndim: int) -> int:
    """torch's legacy choice when ``dim`` is omitted."""
    return 0 if ndim in (0, 1, 3) else 1


def softmax_meta(op: str):
    def meta(a, dim=None, dtype=None):
        a = require_meta(a, op, "a")
        wrap_dim(implicit_softmax_dim(a.ndim) if dim is None else dim, a.ndim, op)
        out = dtype or a.dtype
        require_floating(out, op)
        return TensorMeta(a.shape, out, a.device, requires_grad=a.requires_grad)
    return meta


def _check_normalized(a: TensorMeta, normalized_shape: Any, op: str) -> None:
    norm = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(a.shape[a.ndim - len(norm):]) != norm or len(norm) > a.ndim:
        raise ShapeError(f"{op}: normalized_shape {norm} does not match the trailing dims of "
                         f"input shape {a.shape}; pass input.shape[-k:]")


def _check_param(param: Any, normalized_shape: Any, op: str, name: str) -> None:
    norm = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if isinstance(param, TensorMeta) and param.shape != norm:
        raise ShapeError(f"{op}: {name} has shape {param.shape}, expected normalized_shape {norm}")


def layer_norm_meta(a, normalized_shape, weight=None, bias=None, eps=1e-5):
    a = require_meta(a, "layer_norm", "a")
    require_floating(a.dtype, "layer_norm")
    _check_normalized(a, normalized_shape, "layer_norm")
    _check_param(weight, normalized_shape, "layer_norm", "weight")
    _check_param(bias, normalized_shape, "layer_norm", "bias")
    return TensorMeta(a.shape, a.dtype, a.device, requires_grad=a.requires_grad)


def rms_norm_meta(a, normalized_shape, weight=None, eps=None):
    a = require_meta(a, "rms_norm", "a")
    require_floating(a.dtype, "rms_norm")
    _check_normalized(a, normalized_shape, "rms_norm")
    _check_param(weight, normalized_shape, "rms_norm", "weight")
    return TensorMeta(a.shape, a.dtype, a.device, requires_grad=a.requires_grad)


def _torch_functional_softmax(args: tuple, kwargs: dict) -> Dict[str, Any]:
    """F.softmax(input, dim=None, _stacklevel=3, dtype=None): the 3rd positional is ignored."""
    out = dict(zip(("a", "dim", "_stacklevel", "dtype"), args))
    out.update(kwargs)
    out.pop("_stacklevel", None)
    out["a"] = out.pop("input", out.get("a"))
    return out


def _torch_layer_norm(args: tuple, kwargs: dict) -> Dict[str, Any]:
    """torch.layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable)."""
    out = dict(zip(("a", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"), args))
    out.update(kwargs)
    out.pop("cudnn_enable", None)
    out["a"] = out.pop("input", out.get("a"))
    return out


def _softmax_ref(log: bool):
    def render(a, dim=None, dtype=None):
        d = -1 if dim is None else dim  # callers resolve the implicit dim through the meta
        shifted = f"({a} - np.max({a}, axis={d}, keepdims=True))"
        if log:
            return f"({shifted} - np.log(np.sum(np.exp({shifted}), axis={d}, keepdims=True)))"
        return f"(np.exp({shifted}) / np.sum(np.exp({shifted}), axis={d}, keepdims=True))"
    return render


def _axes(normalized_shape: Any) -> str:
    k = 1 if isinstance(normalized_shape, int) else len(tuple(normalized_shape))
    return repr(tuple(range(-k, 0)))


def _layer_norm_ref(a, normalized_shape, weight=None, bias=None, eps=1e-5):
    ax = _axes(normalized_shape)
    centered = f"({a} - np.mean({a}, axis={ax}, keepdims=True))"
    out = f"({centered} / np.sqrt(np.mean({centered} ** 2, axis={ax}, keepdims=True) + {eps!r}))"
    out = out if weight is None else f"({out} * {weight})"
    return out if bias is None else f"({out} + {bias})"


def _rms_norm_ref(a, normalized_shape, weight=None, eps=None):
    ax = _axes(normalized_shape)
    eps_text = f"{eps!r}" if eps is not None else f"np.finfo(np.asarray({a}).dtype).eps"
    out = f"({a} / np.sqrt(np.mean({a} * {a}, axis={ax}, keepdims=True) + {eps_text}))"
    return out if weight is None else f"({out} * {weight})"


def softmax_dims(ndim: int, dim=None, **_) -> tuple:
    """The one dim softmax normalises over (torch's implicit choice when omitted)."""
    if ndim == 0:
        return ()
    return (wrap_dim(implicit_softmax_dim(ndim) if dim is None else dim, ndim, "softmax"),)


def trailing_dims(ndim: int, normalized_shape, **_) -> tuple:
    """The trailing dims ``normalized_shape`` covers (layer_norm, rms_norm)."""
    k = 1 if isinstance(normalized_shape, int) else len(tuple(normalized_shape))
    return tuple(range(ndim - k, ndim))


# ----------------------------------------------------------------------------- Triton rows

#: rms_norm's default eps: the machine epsilon of the input's dtype, as in eager.
_EPS = {"float16": 0.0009765625, "bfloat16": 0.0078125, "float32": 1.1920928955078125e-07,
        "float64": 2.220446049250313e-16}


def _softmax_rows(log: bool):
    def build(row, a, dim=None, dtype=None):
        x = row.float(a)
        top = row.reduce(x, "max", name="max")
        shifted = row.let(f"{x} - {top}", name="shift")
        num = row.let(f"tl.exp({shifted})", name="exp")
        den = row.reduce(num, "sum", name="den")
        return row.let(f"{shifted} - tl.log({den})" if log else f"{num} / {den}")
    return build


def _affine(row, y: str, weight=None, bias=None) -> str:
    if weight is not None:
        y = f"({y}) * {row.float(weight)}"
    return y if bias is None else f"{y} + {row.float(bias)}"


#: A row whose first-pass mean exceeds 2^60 takes its deviations times 2^-64 (exact: a power
#: of two), so a constant row's deviation from it (a few ulps of the mean) squares without
#: overflow; scaled back, a real spread that large still overflows to inf, as in eager.
_HUGE_MEAN, _DOWN = 2.0 ** 60, 2.0 ** -64


def _row_moments(row, x: str):
    """``(mean, sum of squared deviations)`` of row value ``x``: two passes, corrected (the
    mean ``m = sum(x) / n``; then ``d = x - m`` gives ``c = sum(d) / n``, the mean ``m + c``
    and the squares ``sum(d^2) - c sum(d)``). A constant row gets its own value as mean and
    exactly 0 squares, as eager's Welford moments do (``sum(x) / n`` alone is an ulp off: seed
    85002565), with one reduction more than the uncorrected two passes where a max == min
    check costs two (H200, ``benchmarks/layer_norm_rows_gpu.py``: add + layer_norm + gelu
    0.2449 ms, with the check 0.2668). A constant row whose deviations square below float32's
    normal range (values under ~1e-12) may keep squares of a few denormal ulps: harmless here
    (eps dominates), which is why ``var`` keeps the exact check (``reductions._row_squares``)."""
    n = row.literal(float(row.n))
    first = row.per_row(f"{row.reduce(x, 'sum', name='sum')} / {n}", name="m0")
    scale = row.per_row(f"tl.where(tl.abs({first}) > {row.literal(_HUGE_MEAN)}, "
                        f"{row.literal(_DOWN)}, 1.0)", name="scale")
    dev = row.let(f"({x} - {first}) * {scale}", name="d0")
    s1 = row.reduce(dev, "sum", name="s1")
    s2 = row.reduce(f"{dev} * {dev}", "sum", name="s2")
    c = row.per_row(f"{s1} / {n}", name="c")
    mean = row.per_row(f"{first} + {c} / {scale}", name="mean")
    squares = row.per_row(f"{s2} - {s1} * {c}", name="sq")
    # rounding may leave a hair below 0; NaN stays NaN (tl.maximum would drop it)
    squares = row.per_row(f"tl.where({squares} < 0, 0.0, {squares}) / {scale} / {scale}",
                          name="squares")
    return mean, squares


def _layer_norm_rows(row, a, normalized_shape, weight=None, bias=None, eps=1e-5):
    x, n = row.float(a), row.literal(float(row.n))
    mean, squares = _row_moments(row, x)
    dev = row.let(f"{x} - {mean}", name="dev")
    var = row.per_row(f"{squares} / {n}", name="var")
    if row.device_type == "cpu" and row.out_dtype == "float32" and row.n < _CPU_VECTOR_WIDTH:
        # torch's CPU moments merge the empty vector lanes of a short row into its scalar
        # moments with mean * mean * 0 (moments_utils.h AddMoments): NaN once mean * mean
        # overflows (|mean| > 1.8e19), where the two-pass variance is 0 or finite.
        var = row.per_row(f"tl.where({mean} * {mean} == float('inf'), float('nan'), {var})",
                          name="var_cpu")
    rstd = row.per_row(f"1.0 / tl.sqrt({var} + {row.literal(float(eps))})", name="rstd")
    y = _affine(row, f"{dev} * {rstd}", weight, bias)
    if bias is None and row.framework == "torch" and (
            row.device_type == "cpu" or row.n % _CUDA_VECTOR_ELEMS):
        # torch adds the absent bias as +0.0 (CPU kernel; CUDA's unvectorised kernel, taken
        # when n % 4 != 0), which turns a -0.0 (x == mean, weight < 0) into +0.0. CUDA's
        # vectorised kernel (n % 4 == 0, aligned) adds nothing; TensorPlay's CPU kernel
        # keeps the -0.0 (measured).
        y = f"({y}) + 0.0"
    return row.let(y)


#: Elements of float32 that torch's CPU layer_norm moments process per vector: 8 (AVX2) or
#: 16 (AVX-512); rows shorter than the smaller one are all scalar tail on every CPU (the
#: rule below is measured for TensorPlay 1.0.0's CPU kernel too).
_CPU_VECTOR_WIDTH = 8
#: torch's CUDA layer_norm takes its vectorised kernel only when n is a multiple of this.
_CUDA_VECTOR_ELEMS = 4


def _rms_norm_rows(row, a, normalized_shape, weight=None, eps=None):
    eps = _EPS.get(row.in_dtype, _EPS["float32"]) if eps is None else eps
    x, n = row.float(a), row.literal(float(row.n))
    squares = row.reduce(f"{x} * {x}", "sum", name="sq")
    rstd = row.per_row(f"1.0 / tl.sqrt({squares} / {n} + {row.literal(float(eps))})", name="rstd")
    return row.let(_affine(row, f"{x} * {rstd}", weight))


def _layer_norm_triton_declines(args, out, framework: str):
    if framework == "torch" and out.device_type == "cpu" and out.dtype in ("float16", "bfloat16"):
        # torch's CPU mixed-precision kernel computes fma(x, rstd, -mean * rstd): a row
        # whose variance is below eps (one element, tiny values) gives that rounding noise,
        # amplified by 1 / sqrt(eps), where (x - mean) * rstd gives 0 (measured).
        return (f"torch's CPU {out.dtype} layer_norm gives rounding noise, not 0, for rows "
                "whose variance is below eps; the kernel follows CUDA eager (use CUDA tensors)")
    return None


# ----------------------------------------------------------------------------- records

def _record(name, *, signature, meta, dims, reference, triton, nn=True, **kw):
    spellings = (f"tensorplay:{name}", f"torch:{name}")
    spellings += (f"tensorplay.nn.functional:{name}", f"torch.nn.functional:{name}") if nn else ()
    spellings += kw.pop("extra", ())
    return register(Prim(name=name, kind="norm", signature=signature, meta=meta, dims=dims,
                         spellings=spellings, lowerings={"reference": reference, "triton": triton},
                         **kw))


_record("softmax", signature=softmax, meta=softmax_meta("softmax"), dims=softmax_dims,
        reference=_softmax_ref(False), triton=_softmax_rows(False), extra=("method:softmax",),
        adapters={"torch.nn.functional:softmax": _torch_functional_softmax})
_record("log_softmax", signature=log_softmax, meta=softmax_meta("log_softmax"), dims=softmax_dims,
        reference=_softmax_ref(True), triton=_softmax_rows(True), extra=("method:log_softmax",),
        adapters={"torch.nn.functional:log_softmax": _torch_functional_softmax})
_record("layer_norm", signature=layer_norm, meta=layer_norm_meta, dims=trailing_dims,
        reference=_layer_norm_ref, triton=_layer_norm_rows,
        declines={"triton": _layer_norm_triton_declines},
        adapters={"torch:layer_norm": _torch_layer_norm})
_record("rms_norm", signature=rms_norm, meta=rms_norm_meta, dims=trailing_dims,
        reference=_rms_norm_ref, triton=_rms_norm_rows)
