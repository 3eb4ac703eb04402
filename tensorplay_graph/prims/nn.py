"""Neural-network prims: convolution, batch norm, flatten, and the dropout variants.

* ``conv1d`` / ``conv2d`` / ``conv3d`` -- kind ``opaque``: they stay on the framework's
  own kernel (cuDNN on CUDA, oneDNN on CPU); no backend generates them. They are not
  fences, so the pointwise epilogue that follows (batch norm, bias, relu, residual add)
  forms the next region. Meta rules give the output shape without running them.
* ``batch_norm`` -- the framework call, kind ``opaque``. In training mode with running
  statistics it updates them in place, so it is a ``side_effect`` fence there
  (``flags_if``). The ``decompose`` pass rewrites an inference call (``training=False``
  with running statistics) into ``batch_norm_channels``.
* ``batch_norm_channels`` -- kind ``pointwise``: ``a * scale + shift`` with
  ``scale = weight / sqrt(var + eps)`` and ``shift = bias - mean * scale``, as eager's
  inference kernel computes it. Its per-channel operands are already shaped to broadcast
  against ``a`` (``(C, 1, 1)`` for NCHW), so every backend template is an ordinary
  pointwise expression. Run eagerly, it calls the framework's ``batch_norm``.
* ``max_pool2d`` / ``avg_pool2d`` -- kind ``opaque`` (the framework's pooling kernels, which
  have channels_last paths); ``return_indices=True`` keeps no prim (a tuple result).
* ``flatten`` -- a view (like ``reshape``), so shape_prop needs no data for it.

Records with the ``channels_last`` trait compute the same values in either memory layout
and keep a channels_last input's layout in eager: the ``channels_last`` pass runs them there.
* ``dropout1d/2d/3d``, ``alpha_dropout``, ``feature_alpha_dropout`` -- random in
  training mode (fences), the identity otherwise (``decompose`` removes them).
"""

from __future__ import annotations

from typing import Any, Optional

from ..errors import ShapeError
from ..frameworks import adapter_for
from ..ir.meta import TensorMeta
from . import register
from .effects import same_as_input
from .record import Prim
from .rules import broadcast_shapes, device_of, require_meta, wrap_dim
from .views import reshape_meta

# ----------------------------------------------------------------------------- signatures

def conv(a, weight, bias=None, stride=1, padding=0, dilation=1, groups=1): ...
def batch_norm(a, running_mean=None, running_var=None, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5): ...
def flatten(a, start_dim=0, end_dim=-1): ...
def max_pool2d(a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False): ...
def avg_pool2d(a, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None): ...
def dropout(a, p=0.5, training=True, inplace=False): ...


def batch_norm_channels(a, mean, var, weight=None, bias=None, eps=1e-5):
    """Inference batch norm over per-channel operands shaped to broadcast against ``a``.

    The eager implementation (used when no backend claims the node) is the framework's
    own ``batch_norm`` on the flattened operands, so it equals eager exactly.
    """
    functional = adapter_for(a).functional()

    def flat(t: Any) -> Any:
        return None if t is None else t.reshape(-1)

    return functional.batch_norm(a, flat(mean), flat(var), flat(weight), flat(bias),
                                 False, 0.0, eps)


# ----------------------------------------------------------------------------- meta rules

def _tuple(value: Any, n: int, name: str, op: str) -> tuple:
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise ShapeError(f"{op}: {name} must have {n} values, got {value}")
    return value


def conv_meta(spatial: int):
    op = f"conv{spatial}d"

    def meta(a, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        a, w = require_meta(a, op, "a"), require_meta(weight, op, "weight")
        if a.ndim not in (spatial + 1, spatial + 2) or w.ndim != spatial + 2:
            raise ShapeError(f"{op}: expected a {spatial + 2}-d (or unbatched) input and a "
                             f"{spatial + 2}-d weight, got {a.shape} and {w.shape}")
        channels = a.shape[-spatial - 1]
        if channels != w.shape[1] * int(groups):
            raise ShapeError(f"{op}: input has {channels} channels, weight expects "
                             f"{w.shape[1]} x groups={groups}")
        s, d = _tuple(stride, spatial, "stride", op), _tuple(dilation, spatial, "dilation", op)
        sizes = a.shape[-spatial:]
        if padding == "same":
            out = tuple(sizes)
        else:
            p = (0,) * spatial if padding == "valid" else _tuple(padding, spatial, "padding", op)
            out = tuple((n + 2 * pi - di * (k - 1) - 1) // si + 1
                        for n, pi, di, k, si in zip(sizes, p, d, w.shape[2:], s))
        if any(o <= 0 for o in out):
            raise ShapeError(f"{op}: output size {out} is not positive for input {a.shape}")
        shape = a.shape[:-spatial - 1] + (w.shape[0],) + out
        grad = a.requires_grad or w.requires_grad or getattr(bias, "requires_grad", False)
        return TensorMeta(shape, a.dtype, device_of(a, weight), requires_grad=grad)
    return meta


def batch_norm_meta(a, running_mean=None, running_var=None, weight=None, bias=None,
                    training=False, momentum=0.1, eps=1e-5):
    a = require_meta(a, "batch_norm", "a")
    if a.ndim < 2:
        raise ShapeError(f"batch_norm: input must have a channel dim (N, C, ...), got {a.shape}")
    for name, value in (("running_mean", running_mean), ("running_var", running_var),
                        ("weight", weight), ("bias", bias)):
        if isinstance(value, TensorMeta) and value.numel != a.shape[1]:
            raise ShapeError(f"batch_norm: {name} has {value.numel} elements, the input has "
                             f"{a.shape[1]} channels")
    return same_as_input(a)


def channels_meta(a, mean, var, weight=None, bias=None, eps=1e-5):
    a = require_meta(a, "batch_norm_channels", "a")
    operands = [v for v in (mean, var, weight, bias) if isinstance(v, TensorMeta)]
    if broadcast_shapes(a.shape, *(v.shape for v in operands)) != a.shape:
        raise ShapeError(f"batch_norm_channels: per-channel operands "
                         f"{[v.shape for v in operands]} do not broadcast to {a.shape}")
    grad = a.requires_grad or any(v.requires_grad for v in operands)
    return TensorMeta(a.shape, a.dtype, a.device, requires_grad=grad)


def _pooled(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """ATen's pooling_output_shape: a last window that starts in the padding is dropped."""
    span = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def pool_meta(op: str):
    def meta(a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, **_ignored):
        a = require_meta(a, op, "a")
        if a.ndim not in (3, 4):
            raise ShapeError(f"{op}: expected a 3-d or 4-d input, got {a.shape}")
        k = _tuple(kernel_size, 2, "kernel_size", op)
        s = k if stride is None or stride == () or stride == [] else _tuple(stride, 2, "stride", op)
        p, d = _tuple(padding, 2, "padding", op), _tuple(dilation, 2, "dilation", op)
        out = tuple(_pooled(n, *args, bool(ceil_mode)) for n, *args in zip(a.shape[-2:], k, s, p, d))
        if any(o <= 0 for o in out):
            raise ShapeError(f"{op}: output size {out} is not positive for input {a.shape}")
        return TensorMeta(a.shape[:-2] + out, a.dtype, a.device, requires_grad=a.requires_grad)
    return meta


def _max_pool_args(args: tuple, kwargs: dict) -> Optional[dict]:
    """F.max_pool2d's arguments; ``return_indices=True`` (a tuple result) keeps no prim."""
    names = ("a", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
    bound = dict(zip(names, args), **kwargs)
    if "input" in bound:
        bound["a"] = bound.pop("input")
    return None if bound.pop("return_indices", False) else bound


def flatten_meta(a, start_dim=0, end_dim=-1):
    a = require_meta(a, "flatten", "a")
    if a.ndim == 0:
        return reshape_meta("flatten")(a, (1,))
    start, end = wrap_dim(start_dim, a.ndim, "flatten"), wrap_dim(end_dim, a.ndim, "flatten")
    if start > end:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    size = 1
    for s in a.shape[start:end + 1]:
        size *= s
    return reshape_meta("flatten")(a, a.shape[:start] + (size,) + a.shape[end + 1:])


# ----------------------------------------------------------------------------- templates

def _opmath(x: str) -> str:
    """A NumPy per-channel operand in eager's compute dtype (at least float32)."""
    return f"np.asarray({x}).astype(np.result_type(np.asarray({x}).dtype, np.float32))"


def _channels(sqrt: str):
    """``a * scale + shift`` (eager's inference kernel: alpha = w / sqrt(v + eps),
    beta = b - m * alpha, in float32 for 16-bit inputs); a missing weight is 1, bias 0."""
    def render(a, mean, var, weight=None, bias=None, eps=1e-5):
        if sqrt.startswith("np."):
            mean, var, weight, bias = (None if v is None else _opmath(v)
                                       for v in (mean, var, weight, bias))
        inv = f"(1.0 / {sqrt}({var} + {eps!r}))"
        scale = inv if weight is None else f"({weight} * {inv})"
        shift = f"(-{mean} * {scale})" if bias is None else f"({bias} - {mean} * {scale})"
        return f"({a} * {scale} + {shift})"
    return render


def _torch_batch_norm(args: tuple, kwargs: dict) -> Optional[dict]:
    """torch.batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
    eps, cudnn_enabled): the ATen order, unlike F.batch_norm's."""
    names = ("a", "weight", "bias", "running_mean", "running_var", "training", "momentum",
             "eps", "cudnn_enabled")
    out = dict(zip(names, args))
    out.update(kwargs)
    out.pop("cudnn_enabled", None)
    return out


def _updates_running_stats(a, running_mean=None, running_var=None, weight=None, bias=None,
                           training=False, momentum=0.1, eps=1e-5) -> bool:
    return training is not False and (running_mean is not None or running_var is not None)


def _training(a, p=0.5, training=True, inplace=False) -> bool:
    return training is not False


# ----------------------------------------------------------------------------- records

for _n in (1, 2, 3):
    register(Prim(
        name=f"conv{_n}d", kind="opaque", signature=conv, meta=conv_meta(_n),
        spellings=(f"torch:conv{_n}d", f"torch.nn.functional:conv{_n}d",
                   f"tensorplay:conv{_n}d", f"tensorplay.nn.functional:conv{_n}d"),
        traits={"channels_last", "fresh"} if _n == 2 else {"fresh"},
        doc="runs on the framework's convolution (cuDNN on CUDA); its epilogue fuses after it"))

register(Prim(
    name="max_pool2d", kind="opaque", signature=max_pool2d, meta=pool_meta("max_pool2d"),
    spellings=("torch.nn.functional:max_pool2d",),
    adapters={"torch.nn.functional:max_pool2d": _max_pool_args},
    traits={"channels_last", "fresh"}, doc="the framework's pooling kernel"))

register(Prim(
    name="avg_pool2d", kind="opaque", signature=avg_pool2d, meta=pool_meta("avg_pool2d"),
    spellings=("torch.nn.functional:avg_pool2d",), traits={"channels_last", "fresh"},
    doc="the framework's pooling kernel"))

register(Prim(
    name="batch_norm", kind="opaque", signature=batch_norm, meta=batch_norm_meta,
    spellings=("torch.nn.functional:batch_norm", "tensorplay.nn.functional:batch_norm",
               "torch:batch_norm"),
    side_effect=True, flags_if=_updates_running_stats, traits={"fresh"},
    adapters={"torch:batch_norm": _torch_batch_norm},
    doc="training mode updates the running statistics in place (a fence); inference is "
        "rewritten to batch_norm_channels by the decompose pass"))

register(Prim(
    name="batch_norm_channels", kind="pointwise", signature=batch_norm_channels,
    meta=channels_meta, spellings=("tensorplay_graph.prims.nn:batch_norm_channels",),
    lowerings={"reference": _channels("np.sqrt"), "triton": _channels("tl.sqrt"),
               "tilelang": _channels("T.sqrt")}, traits={"channels_last"},
    doc="inference batch norm: a per-channel scale / shift over broadcast operands"))

register(Prim(
    name="flatten", kind="view", signature=flatten, meta=flatten_meta,
    spellings=("torch:flatten", "tensorplay:flatten", "method:flatten",
               "tensorplay.nn.functional:flatten")))

for _name in ("dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
    register(Prim(
        name=_name, kind="opaque", signature=dropout, meta=same_as_input,
        spellings=(f"torch.nn.functional:{_name}", f"tensorplay.nn.functional:{_name}"),
        random=True, flags_if=_training,
        doc=f"{_name}(training=False) returns its input: the decompose pass removes it"))
