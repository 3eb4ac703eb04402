"""Opaque prims that are barriers for a stated reason (kind ``opaque``, no lowerings).

* random -- ``rand randn rand_like randn_like randint bernoulli dropout multinomial
  normal``: ``random=True``. They run eagerly, in program order, so the random
  stream matches eager execution. Their meta rules compute shape and dtype from
  the arguments. ``dropout(training=False)`` is the identity (torch and TensorPlay
  return the input itself), so the flag holds only when ``training`` is not
  ``False`` (``flags_if``); an eval-mode dropout is then an ordinary, non-fence
  node that no backend lowers (a kernel cannot return an alias of its input).
* data-dependent -- ``nonzero item tolist unique masked_select argwhere bincount``:
  ``data_dependent=True``. Their result's shape (or value) depends on tensor
  data, so their meta rules raise ``ShapeError``: ``shape_prop`` needs example
  inputs for graphs that contain them.
* side effect -- ``_assert`` (``torch._assert``, captured through
  ``__torch_function__``): ``side_effect=True``, so it is never removed or
  reordered. ``print`` and ``manual_seed`` are not recorded: they take no
  traced tensor, so capture runs them once instead of recording a node; in-place
  methods, ``out=`` and ``mutates_args`` are ``mutation`` barriers already.

Random ops with no tensor argument (``torch.rand(3, 4)``) are recorded by our
tracer as nodes too (``capture/randomness.py``), never frozen into constants.
"""

from __future__ import annotations

from typing import Any, Dict

from ..errors import ShapeError
from ..ir.meta import TensorMeta
from . import register
from .record import Prim
from .rules import DEFAULT_FLOAT, DEFAULT_INT, broadcast_shapes, device_of, is_meta, require_meta

# ----------------------------------------------------------------------------- signatures

def rand(*size, dtype=None, device=None, requires_grad=False, generator=None): ...
def rand_like(a, dtype=None, device=None, requires_grad=False): ...
def randint(low, high, size, generator=None, dtype=None, device=None, requires_grad=False): ...
def bernoulli(a, p=None, generator=None): ...
def dropout(a, p=0.5, training=True, inplace=False): ...
def multinomial(a, num_samples, replacement=False, generator=None): ...
def normal(mean, std=1.0, size=None, generator=None, dtype=None, device=None,
           requires_grad=False): ...
def nonzero(a, as_tuple=False): ...
def item(a): ...
def unique(a, sorted=True, return_inverse=False, return_counts=False, dim=None): ...
def masked_select(a, mask): ...
def bincount(a, weights=None, minlength=0): ...
def assert_(condition, message=""): ...


# ----------------------------------------------------------------------------- meta rules

def _device(device: Any) -> str:
    """``torch.device("cuda", 0)`` / ``"cuda:0"`` / TensorPlay devices -> ``"cuda:0"``."""
    if device is None:
        return "cpu"
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if isinstance(kind, str):
        return kind if index is None else f"{kind}:{index}"
    return str(device)


def _size(size: Any, op: str) -> tuple:
    """``rand(3, 4)``, ``rand((3, 4))`` and ``rand(torch.Size([3, 4]))`` -> ``(3, 4)``."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)) or \
            (len(size) == 1 and type(size[0]).__name__ == "Size"):
        size = size[0]
    try:
        return tuple(int(s) for s in size)
    except (TypeError, ValueError):
        raise ShapeError(f"{op}: size must be integers, got {size!r}") from None


def factory_meta(op: str, default_dtype: str):
    def meta(size, dtype=None, device=None, requires_grad=False, generator=None):
        # ``size`` is the tuple bound to ``*size`` by the signature
        return TensorMeta(_size(size, op), dtype or default_dtype, _device(device),
                          requires_grad=bool(requires_grad))
    return meta


def like_meta(a, dtype=None, device=None, requires_grad=False):
    a = require_meta(a, "rand_like", "a")
    return TensorMeta(a.shape, dtype or a.dtype, _device(device) if device else a.device,
                      requires_grad=bool(requires_grad))


def randint_meta(low, high, size, generator=None, dtype=None, device=None, requires_grad=False):
    return TensorMeta(_size((size,), "randint"), dtype or DEFAULT_INT, _device(device),
                      requires_grad=bool(requires_grad))


def _randint_adapter(args: tuple, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``randint(high, size)`` and ``randint(low, high, size)``: torch's two overloads."""
    names = ("high", "size") if len(args) == 2 else ("low", "high", "size")
    out = {"low": 0, **dict(zip(names, args)), **kwargs}
    return out


def same_as_input(a, **_):
    a = require_meta(a, "random op", "a")
    return TensorMeta(a.shape, a.dtype, a.device, requires_grad=a.requires_grad)


def multinomial_meta(a, num_samples, replacement=False, generator=None):
    a = require_meta(a, "multinomial", "a")
    if a.ndim not in (1, 2):
        raise ShapeError(f"multinomial: probabilities must be 1-d or 2-d, got shape {a.shape}")
    return TensorMeta((*a.shape[:-1], int(num_samples)), DEFAULT_INT, a.device)


def normal_meta(mean, std=1.0, size=None, generator=None, dtype=None, device=None,
                requires_grad=False):
    tensors = [t for t in (mean, std) if is_meta(t)]
    if not tensors:
        if size is None:
            raise ShapeError("normal: with float mean and std, pass size=(...)")
        return TensorMeta(_size((size,), "normal"), dtype or DEFAULT_FLOAT, _device(device),
                          requires_grad=bool(requires_grad))
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return TensorMeta(shape, tensors[0].dtype, device_of(mean, std),
                      requires_grad=any(t.requires_grad for t in tensors))


def data_dependent_meta(op: str, depends: str):
    def meta(*args, **kwargs):
        raise ShapeError(f"{op}: {depends} depends on the tensor's data, so no meta rule can "
                         f"compute it; pass example inputs (shape_prop(gm, *inputs)) so it is "
                         f"measured")
    return meta


def assert_meta(condition, message=""):
    return None  # no tensor result


def _training(a, p=0.5, training=True, inplace=False):
    return training is not False


# ----------------------------------------------------------------------------- records

def _opaque(name: str, *, signature, meta, spellings, **kw) -> Prim:
    return register(Prim(name=name, kind="opaque", signature=signature, meta=meta,
                         spellings=tuple(spellings), **kw))


def _everywhere(name: str, method: bool = True) -> tuple:
    return (f"torch:{name}", f"tensorplay:{name}") + ((f"method:{name}",) if method else ())


# random
_opaque("rand", signature=rand, meta=factory_meta("rand", DEFAULT_FLOAT),
        spellings=_everywhere("rand", False), random=True)
_opaque("randn", signature=rand, meta=factory_meta("randn", DEFAULT_FLOAT),
        spellings=_everywhere("randn", False), random=True)
_opaque("rand_like", signature=rand_like, meta=like_meta,
        spellings=_everywhere("rand_like", False), random=True)
_opaque("randn_like", signature=rand_like, meta=like_meta,
        spellings=_everywhere("randn_like", False), random=True)
_opaque("randint", signature=randint, meta=randint_meta,
        spellings=_everywhere("randint", False), random=True,
        adapters={"torch:randint": _randint_adapter, "tensorplay:randint": _randint_adapter})
_opaque("bernoulli", signature=bernoulli, meta=same_as_input,
        spellings=_everywhere("bernoulli"), random=True)
_opaque("dropout", signature=dropout, meta=same_as_input,
        spellings=("torch.nn.functional:dropout", "tensorplay.nn.functional:dropout", "torch:dropout",
                   "tensorplay:dropout"),
        random=True, flags_if=_training, aliases={"train": "training"},
        doc="dropout(training=False) returns its input: not random (flags_if)")
_opaque("multinomial", signature=multinomial, meta=multinomial_meta,
        spellings=_everywhere("multinomial"), random=True)
_opaque("normal", signature=normal, meta=normal_meta,
        spellings=_everywhere("normal", False), random=True)

# data-dependent
def _data_dependent(name: str, signature, depends: str, spellings=None) -> Prim:
    """An op whose result (``depends``: its shape or value) is known only from the data."""
    return _opaque(name, signature=signature, meta=data_dependent_meta(name, depends),
                   spellings=spellings or _everywhere(name), data_dependent=True)


_data_dependent("nonzero", nonzero, "the number of nonzero elements")
_data_dependent("item", item, "the Python value", ("tensorplay:item", "method:item"))
_data_dependent("tolist", item, "the Python value", ("method:tolist",))
_data_dependent("unique", unique, "the number of distinct elements")
_data_dependent("masked_select", masked_select, "the number of selected elements")
_data_dependent("argwhere", item, "the number of nonzero elements")
_data_dependent("bincount", bincount, "the result's length (max + 1)")

# side effect
_opaque("assert", signature=assert_, meta=assert_meta,
        spellings=("torch:_assert",), side_effect=True)
