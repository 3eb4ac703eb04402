"""Row-wise fused patterns (kind ``norm``): softmax log_softmax layer_norm rms_norm.

Each normalises over trailing dims (``normalized_shape``) or one ``dim``; the
result has the input's shape. Backends build their kernels from the prim name.
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


def _record(name, signature, meta, reference, nn=True, **kw):
    spellings = (f"tensorplay:{name}", f"torch:{name}")
    spellings += (f"tensorplay.nn.functional:{name}", f"torch.nn.functional:{name}") if nn else ()
    spellings += kw.pop("extra", ())
    return register(Prim(name=name, kind="norm", signature=signature, meta=meta,
                         spellings=spellings, lowerings={"reference": reference}, **kw))


_record("softmax", softmax, softmax_meta("softmax"), _softmax_ref(False), extra=("method:softmax",),
        adapters={"torch.nn.functional:softmax": _torch_functional_softmax})
_record("log_softmax", log_softmax, softmax_meta("log_softmax"), _softmax_ref(True),
        extra=("method:log_softmax",),
        adapters={"torch.nn.functional:log_softmax": _torch_functional_softmax})
_record("layer_norm", layer_norm, layer_norm_meta, _layer_norm_ref,
        adapters={"torch:layer_norm": _torch_layer_norm})
_record("rms_norm", rms_norm, rms_norm_meta, _rms_norm_ref)
