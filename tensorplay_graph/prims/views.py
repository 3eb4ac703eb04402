"""View prims (kind ``view``): reshape view permute transpose unsqueeze squeeze expand
contiguous, and basic slicing (``getitem`` with ints, slices, None, Ellipsis).

Meta rules compute the view's strides like torch, so backends can address
non-contiguous inputs without a copy.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import ShapeError
from ..ir.meta import TensorMeta, contiguous_strides, tensor_meta_of
from . import register
from .indexing import index_items
from .record import Prim
from .rules import require_meta, wrap_dim


def reshape(a, shape): ...
def view(a, shape): ...
def permute(a, dims): ...
def transpose(a, dim0, dim1): ...
def unsqueeze(a, dim): ...
def squeeze(a, dim=None): ...
def expand(a, shape): ...
def contiguous(a): ...
def getitem(a, index): ...


def _meta(a: TensorMeta, shape, stride) -> TensorMeta:
    return TensorMeta(tuple(shape), a.dtype, a.device, tuple(stride), a.requires_grad)


def infer_size(shape: Sequence[int], numel: int, op: str) -> Tuple[int, ...]:
    """Resolve one ``-1`` in ``shape`` against ``numel`` elements."""
    shape = [int(s) for s in shape]
    known = 1
    for s in shape:
        known *= s if s != -1 else 1
    if shape.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {tuple(shape)}")
    if -1 in shape:
        if known == 0 or numel % known:
            raise ShapeError(f"{op}: shape {tuple(shape)} is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    elif known != numel:
        raise ShapeError(f"{op}: shape {tuple(shape)} is invalid for input of size {numel}")
    return tuple(shape)


def view_strides(old: Sequence[int], stride: Sequence[int], new: Sequence[int]) -> Optional[List[int]]:
    """Strides of ``new`` viewing memory laid out as (old, stride), or None (torch's computeStride)."""
    if not old:
        old, stride = (1,), (1,)
    if 0 in old:
        return list(contiguous_strides(tuple(new)))
    view_d = len(new) - 1
    base = stride[-1]
    tensor_numel = view_numel = 1
    out = [0] * len(new)
    for d in range(len(old) - 1, -1, -1):
        tensor_numel *= old[d]
        if d == 0 or (old[d - 1] != 1 and stride[d - 1] != tensor_numel * base):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                out[view_d] = view_numel * base
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                base, tensor_numel, view_numel = stride[d - 1], 1, 1
    return out if view_d == -1 else None


def reshape_meta(op: str):
    def meta(a, shape):
        a = require_meta(a, op, "a")
        new = infer_size(shape, a.numel, op)
        strides = view_strides(a.shape, a.stride, new)
        if strides is None:
            if op == "view":
                raise ShapeError(f"view: shape {new} is incompatible with the input's strides "
                                 f"{a.stride}; use reshape (copies) or call .contiguous() first")
            strides = contiguous_strides(new)
        return _meta(a, new, strides)
    return meta


def permute_meta(a, dims):
    a = require_meta(a, "permute", "a")
    order = [wrap_dim(d, a.ndim, "permute") for d in dims]
    if sorted(order) != list(range(a.ndim)):
        raise ShapeError(f"permute: dims {tuple(dims)} are not a permutation of {a.ndim} dims")
    return _meta(a, [a.shape[d] for d in order], [a.stride[d] for d in order])


def transpose_meta(a, dim0, dim1):
    a = require_meta(a, "transpose", "a")
    order = list(range(a.ndim))
    if a.ndim:
        i, j = wrap_dim(dim0, a.ndim, "transpose"), wrap_dim(dim1, a.ndim, "transpose")
        order[i], order[j] = order[j], order[i]
    return permute_meta(a, order)


def unsqueeze_meta(a, dim):
    a = require_meta(a, "unsqueeze", "a")
    d = wrap_dim(dim, a.ndim + 1, "unsqueeze")
    new_stride = a.shape[d] * a.stride[d] if d < a.ndim else 1
    return _meta(a, a.shape[:d] + (1,) + a.shape[d:], a.stride[:d] + (new_stride,) + a.stride[d:])


def squeeze_meta(a, dim=None):
    a = require_meta(a, "squeeze", "a")
    if dim is None:
        dims = set(range(a.ndim))
    else:
        dims = {wrap_dim(d, a.ndim, "squeeze") for d in ((dim,) if isinstance(dim, int) else dim)}
    keep = [i for i in range(a.ndim) if not (i in dims and a.shape[i] == 1)]
    return _meta(a, [a.shape[i] for i in keep], [a.stride[i] for i in keep])


def expand_meta(a, shape):
    a = require_meta(a, "expand", "a")
    shape = tuple(int(s) for s in shape)
    lead = len(shape) - a.ndim
    if lead < 0:
        raise ShapeError(f"expand: target {shape} has fewer dims than the input's {a.shape}")
    sizes, strides = [], []
    for i, size in enumerate(shape):
        if i < lead:
            if size < 0:
                raise ShapeError(f"expand: -1 is not allowed for new leading dim {i} in {shape}")
            sizes.append(size), strides.append(0)
            continue
        old = a.shape[i - lead]
        if size == -1 or size == old:
            sizes.append(old), strides.append(a.stride[i - lead])
        elif old == 1:
            sizes.append(size), strides.append(0)
        else:
            raise ShapeError(f"expand: size {old} of dim {i - lead} cannot expand to {size} "
                             f"(input {a.shape}, target {shape}); only size-1 dims expand")
    return _meta(a, sizes, strides)


def contiguous_meta(a):
    a = require_meta(a, "contiguous", "a")
    return _meta(a, a.shape, contiguous_strides(a.shape))


def getitem_meta(a, index):
    """Basic indexing: ints drop a dim, slices narrow it, None inserts one, ... fills."""
    a = require_meta(a, "getitem", "a")
    items = index_items(index, a.ndim)
    sizes, strides, d = [], [], 0
    for it in items:
        if it is None:
            sizes.append(1), strides.append(a.stride[d] * a.shape[d] if d < a.ndim else 1)
        elif isinstance(it, slice):
            start, stop, step = it.indices(a.shape[d])
            if step <= 0:
                raise ShapeError(f"getitem: slice step must be positive, got {step}")
            sizes.append(len(range(start, stop, step))), strides.append(a.stride[d] * step)
            d += 1
        elif isinstance(it, int) and not isinstance(it, bool):
            if not -a.shape[d] <= it < a.shape[d]:
                raise ShapeError(f"getitem: index {it} out of range for dim {d} of size {a.shape[d]}")
            d += 1
        else:
            raise ShapeError(f"getitem: {type(it).__name__} index {it!r} is not basic slicing")
    return _meta(a, sizes, strides)


def _varargs(name: str):
    """x.view(2, 3) / x.view((2, 3)) / x.view(shape=...); x.view(dtype) is not a view prim."""
    def adapt(args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
        rest = args[1:]
        if len(rest) == 1 and not isinstance(rest[0], int):
            rest = rest[0]
        if type(rest).__name__ in ("dtype", "DType"):
            return None
        value = kwargs.get("size", kwargs.get("shape", kwargs.get("dims", rest)))
        return {"a": args[0], name: tuple(value)}
    return adapt


def _is_basic(item: Any) -> bool:
    if item is None or item is Ellipsis or isinstance(item, int):
        return True
    if isinstance(item, slice):
        return all(v is None or isinstance(v, int) for v in (item.start, item.stop, item.step))
    return False


def _getitem(args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
    """operator.getitem(tensor, basic index); tuples/lists of values and tensor indices are not."""
    a, index = args
    meta = getattr(a, "meta", {}).get("tensor_meta") if hasattr(a, "meta") else None
    if meta is not None and not isinstance(meta, TensorMeta):
        return None  # indexing a tuple output, not a tensor
    items = index if isinstance(index, tuple) else (index,)
    if not all(_is_basic(it) for it in items):
        return None
    return {"a": a, "index": index}


def _t(args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
    """``x.t()`` / ``torch.t(x)`` of a 2-d tensor: ``transpose(x, 0, 1)``. Of fewer dims it is
    ``x`` itself, and without a shape it is not known which: no prim."""
    meta = tensor_meta_of(args[0]) if len(args) == 1 and not kwargs else None
    if meta is None or len(meta.shape) != 2:
        return None
    return {"a": args[0], "dim0": 0, "dim1": 1}


def _transpose_property(args: tuple, kwargs: dict) -> Optional[Dict[str, Any]]:
    """``x.T`` of a matrix and ``x.mT`` of a batch of them (captured as ``getattr`` nodes):
    the last two dims swapped. Other attributes, and ``.T`` of other ranks, are no prim."""
    if len(args) != 2 or kwargs or args[1] not in ("T", "mT"):
        return None
    meta = tensor_meta_of(args[0])
    if meta is None or len(meta.shape) < 2 or (args[1] == "T" and len(meta.shape) != 2):
        return None
    return {"a": args[0], "dim0": len(meta.shape) - 2, "dim1": len(meta.shape) - 1}


def _reshape_spell(name: str) -> tuple:
    return (f"tensorplay:{name}", f"torch:{name}", f"method:{name}")


def _record(name, *, signature, meta, spellings, reference, **kw):
    return register(Prim(name=name, kind="view", signature=signature, meta=meta,
                         spellings=spellings, lowerings={"reference": reference}, **kw))


def _squeeze_ref(a, dim=None):
    if dim is None:
        return f"np.squeeze({a})"
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return f"np.squeeze({a}, axis=tuple(d for d in {dims!r} if np.shape({a})[d] == 1))"


def _expand_ref(a, shape):
    return (f"np.broadcast_to({a}, tuple(s if s != -1 else o for s, o in zip("
            f"{tuple(shape)!r}, (1,) * ({len(shape)} - np.ndim({a})) + np.shape({a}))))")


_SHAPE_ALIASES = {"size": "shape", "sizes": "shape"}
_record("reshape", signature=reshape, meta=reshape_meta("reshape"), spellings=_reshape_spell("reshape"),
        reference="np.reshape({a}, {shape!r})", adapters={"method:reshape": _varargs("shape")})
_record("view", signature=view, meta=reshape_meta("view"), spellings=("tensorplay:view", "method:view"),
        reference="np.reshape({a}, {shape!r})", adapters={"method:view": _varargs("shape")})
_record("permute", signature=permute, meta=permute_meta, spellings=_reshape_spell("permute"),
        reference="np.transpose({a}, {dims!r})", adapters={"method:permute": _varargs("dims")})
_record("transpose", signature=transpose, meta=transpose_meta,
        spellings=_reshape_spell("transpose") + _reshape_spell("t") + ("builtins:getattr",),
        reference="np.swapaxes({a}, {dim0!r}, {dim1!r})",
        adapters={**{spelling: _t for spelling in _reshape_spell("t")},
                  "builtins:getattr": _transpose_property})
_record("unsqueeze", signature=unsqueeze, meta=unsqueeze_meta, spellings=_reshape_spell("unsqueeze"),
        reference="np.expand_dims({a}, {dim!r})")
_record("squeeze", signature=squeeze, meta=squeeze_meta, spellings=_reshape_spell("squeeze"),
        reference=_squeeze_ref)
_record("expand", signature=expand, meta=expand_meta, spellings=("tensorplay:expand", "method:expand"),
        reference=_expand_ref, adapters={"method:expand": _varargs("shape")}, aliases=_SHAPE_ALIASES)
_record("contiguous", signature=contiguous, meta=contiguous_meta,
        spellings=("tensorplay:contiguous", "method:contiguous"), reference="np.ascontiguousarray({a})")
_record("getitem", signature=getitem, meta=getitem_meta, spellings=("operator:getitem", "method:__getitem__"),
        reference="{a}[{index!r}]", adapters={"operator:getitem": _getitem, "method:__getitem__": _getitem})
