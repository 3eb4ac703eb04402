"""Index maps: view prims and ``cat`` as index arithmetic (``IndexMap`` lowerings).

A kernel that reads a view of a value, or the concatenation of several, needs no copy:
it computes each element's coordinates in the operand. The rules here give, for the output
coordinates (index expressions), the operand coordinates (and for ``cat`` which piece);
they are attached to the records under ``"triton"`` and registered beside ``cat``'s record.
Coordinates are plain integer arithmetic text; a size-1 dim's coordinate is ``"0"``.

>>> Source("a", ("i1", "i0")) == _permute(["i0", "i1"], (3, 2), None, (1, 0))[0]
True
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

from ..errors import ShapeError
from ..ir.meta import TensorMeta, contiguous_strides
from . import _REGISTRY, register
from .lowering import IndexMap, Source
from .indexing import index_items
from .record import Prim
from .rules import require_meta, result_type, wrap_dim
from .views import view_strides

Coords = List[str]


def _at(value: int) -> str:
    return str(int(value))


def _shifted(coord: str, start: int, step: int = 1) -> str:
    """``start + step * coord`` as text, folding the trivial cases."""
    scaled = coord if step == 1 else f"{coord} * {step}"
    if start == 0:
        return scaled
    return f"({scaled} + {start})" if start > 0 else f"({scaled} - {-start})"


def _identity(coords, out_shape, a, **_) -> List[Source]:
    return [Source("a", tuple(coords))]


def _permute(coords, out_shape, a, dims) -> List[Source]:
    n = len(coords)
    inner: List[str] = ["0"] * n
    for i, d in enumerate(dims):
        inner[d % n] = coords[i]
    return [Source("a", tuple(inner))]


def _transpose(coords, out_shape, a, dim0, dim1) -> List[Source]:
    inner = list(coords)
    if inner:
        i, j = dim0 % len(inner), dim1 % len(inner)
        inner[i], inner[j] = inner[j], inner[i]
    return [Source("a", tuple(inner))]


def _unsqueeze(coords, out_shape, a, dim) -> List[Source]:
    d = wrap_dim(dim, a.ndim + 1, "unsqueeze")
    return [Source("a", tuple(coords[:d] + coords[d + 1:]))]


def _squeeze(coords, out_shape, a, dim=None) -> List[Source]:
    dims = set(range(a.ndim)) if dim is None else \
        {wrap_dim(d, a.ndim, "squeeze") for d in ((dim,) if isinstance(dim, int) else dim)}
    rest, inner = iter(coords), []
    for i, size in enumerate(a.shape):
        inner.append("0" if i in dims and size == 1 else next(rest))
    return [Source("a", tuple(inner))]


def _expand(coords, out_shape, a, shape) -> List[Source]:
    lead = len(coords) - a.ndim
    return [Source("a", tuple("0" if size == 1 else coords[lead + i]
                              for i, size in enumerate(a.shape)))]


def _reshape(coords, out_shape, a, shape) -> List[Source]:
    """Row-major reshape: dims are matched in groups of equal element count (a dim kept,
    split or merged), and within a group the output's linear index is split over the
    operand's dims, so a kept dim passes its coordinate through."""
    ins, outs = tuple(a.shape), tuple(out_shape)
    if 0 in ins or 0 in outs:
        return [Source("a", tuple(_split(coords, outs, ins)))]
    inner: List[str] = ["0"] * len(ins)
    i = j = 0
    while i < len(ins) and j < len(outs):
        gi, gj = [i], [j]
        pi, pj = ins[i], outs[j]
        i, j = i + 1, j + 1
        while pi != pj:
            if pi < pj:
                pi, i = pi * ins[i], i + 1
                gi.append(i - 1)
            else:
                pj, j = pj * outs[j], j + 1
                gj.append(j - 1)
        split = _split([coords[k] for k in gj], [outs[k] for k in gj], [ins[k] for k in gi])
        for k, expr in zip(gi, split):
            inner[k] = expr
    return [Source("a", tuple(inner))]


def _split(coords: Sequence[str], outs: Sequence[int], ins: Sequence[int]) -> List[str]:
    """Coordinates over ``ins`` of the row-major element at ``coords`` over ``outs``."""
    if len(outs) == 1 and len(ins) == 1:
        return [coords[0]]
    strides = contiguous_strides(tuple(outs))
    terms = [c if st == 1 else f"{c} * {st}" for c, st, n in zip(coords, strides, outs)
             if n != 1]
    linear = "(" + " + ".join(terms) + ")" if terms else "0"
    inner, numel = [], 1
    for n in ins:
        numel *= n
    for st, n in zip(contiguous_strides(tuple(ins)), ins):
        if n == 1:
            inner.append("0")
            continue
        part = linear if st == 1 else f"{linear} // {st}"
        inner.append(part if st * n == numel else f"({part} % {n})")
    return inner


def _getitem(coords, out_shape, a, index) -> List[Source]:
    items = index_items(index, a.ndim)
    out, inner, d = iter(coords), [], 0
    for it in items:
        if it is None:
            next(out)
        elif isinstance(it, slice):
            start, _, step = it.indices(a.shape[d])
            inner.append(_shifted(next(out), start, step))
            d += 1
        else:
            inner.append(_at(it % a.shape[d]))
            d += 1
    return [Source("a", tuple(inner))]


def _narrow(coords, out_shape, a, dim, start, length) -> List[Source]:
    d = wrap_dim(dim, a.ndim, "narrow")
    inner = list(coords)
    inner[d] = _shifted(inner[d], start % a.shape[d] if start < 0 else start)
    return [Source("a", tuple(inner))]


# ----------------------------------------------------------------------------- cat

def cat(tensors, dim=0): ...
def narrow(a, dim, start, length): ...


def _pieces(tensors: Sequence[TensorMeta]) -> List[int]:
    """Positions of the pieces that count: torch skips 1-d empty tensors beside others."""
    keep = [i for i, t in enumerate(tensors) if not (t.ndim == 1 and t.shape[0] == 0)]
    return keep or list(range(len(tensors)))


def cat_meta(tensors, dim=0) -> TensorMeta:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ShapeError("cat: expects a non-empty list of tensors")
    metas = [require_meta(t, "cat", f"tensors[{i}]") for i, t in enumerate(tensors)]
    pieces = [metas[i] for i in _pieces(metas)]
    first = pieces[0]
    d = wrap_dim(dim, first.ndim, "cat")
    total = 0
    for t in pieces:
        same = t.ndim == first.ndim and all(t.shape[i] == first.shape[i]
                                             for i in range(first.ndim) if i != d)
        if not same:
            raise ShapeError(f"cat: sizes of tensors must match except in dim {d}; got "
                             f"{[p.shape for p in pieces]}")
        total += t.shape[d]
    shape = first.shape[:d] + (total,) + first.shape[d + 1:]
    return TensorMeta(shape, result_type(*pieces), first.device, contiguous_strides(shape))


def _cat(coords, out_shape, tensors, dim=0) -> List[Source]:
    keep = _pieces(tensors)
    d = wrap_dim(dim, tensors[keep[0]].ndim, "cat")
    sources, offset = [], 0
    for k in keep:
        size = tensors[k].shape[d]
        if size == 0:
            continue
        inner = list(coords)
        inner[d] = _shifted(coords[d], -offset)
        end = offset + size
        where = " & ".join(([f"({coords[d]} >= {offset})"] if offset else []) +
                           [f"({coords[d]} < {end})"])
        sources.append(Source("tensors", tuple(inner), item=k, where=where))
        offset = end
    return sources


def _cat_declines(args, out, framework: str) -> Optional[str]:
    pieces = [t for t in args["tensors"] if isinstance(t, TensorMeta)]
    if len(pieces) != len(args["tensors"]):
        return "cat of values that are not tensors"
    if framework != "torch" and len({t.dtype for t in pieces}) > 1:
        return f"cat of mixed dtypes in {framework} runs eagerly (its promotion is not checked)"
    return None


def _cat_ref(tensors, dim=0) -> str:
    return f"np.concatenate([{', '.join(tensors)}], axis={dim!r})"


def narrow_meta(a, dim, start, length) -> TensorMeta:
    a = require_meta(a, "narrow", "a")
    d = wrap_dim(dim, a.ndim, "narrow")
    begin = start + a.shape[d] if start < 0 else start
    if not 0 <= begin <= a.shape[d] or length < 0 or begin + length > a.shape[d]:
        raise ShapeError(f"narrow: start {start} and length {length} exceed dim {d} of size "
                         f"{a.shape[d]}")
    shape = a.shape[:d] + (length,) + a.shape[d + 1:]
    return TensorMeta(shape, a.dtype, a.device, a.stride, a.requires_grad)


register(Prim(
    name="cat", kind="gather", signature=cat, meta=cat_meta,
    spellings=("torch:cat", "torch:concat", "torch:concatenate", "tensorplay:cat",
               "tensorplay:concat"),
    aliases={"axis": "dim"},
    lowerings={"reference": _cat_ref, "triton": IndexMap(_cat)},
    declines={"triton": _cat_declines},
    doc="concatenation along ``dim``: a fresh tensor; kernels select the piece per element",
))
register(Prim(
    name="narrow", kind="view", signature=narrow, meta=narrow_meta,
    spellings=("torch:narrow", "tensorplay:narrow", "method:narrow"),
    lowerings={"reference": lambda a, dim, start, length:
               f"np.take({a}, range({start} % np.shape({a})[{dim}], {start} % np.shape({a})"
               f"[{dim}] + {length}), axis={dim})",
               "triton": IndexMap(_narrow)},
))

def _reshape_copies(out, a, shape) -> bool:
    return view_strides(a.shape, a.stride, tuple(out.shape)) is None


def _contiguous_copies(out, a) -> bool:
    return not _same_strides(a.shape, a.stride, contiguous_strides(tuple(a.shape)))


def _same_strides(shape, have, want) -> bool:
    """Equal strides on every dim of more than one element (torch's is_contiguous)."""
    return 0 in shape or all(h == w for h, w, n in zip(have, want, shape) if n != 1)


_COPIES = {"reshape": _reshape_copies, "contiguous": _contiguous_copies}
_VIEW_MAPS = {"contiguous": _identity, "permute": _permute, "transpose": _transpose,
              "unsqueeze": _unsqueeze, "squeeze": _squeeze, "expand": _expand,
              "reshape": _reshape, "view": _reshape, "getitem": _getitem}
_KEEPS_FLAT = {"contiguous", "unsqueeze", "squeeze", "reshape", "view"}
for _name, _rule in _VIEW_MAPS.items():
    _REGISTRY[_name].lowerings["triton"] = IndexMap(_rule, copies=_COPIES.get(_name),
                                                    keeps_flat=_name in _KEEPS_FLAT)


def _cat_vjp(e, g, out, tensors, dim=0):
    metas = [t.meta["tensor_meta"] for t in tensors]
    keep = _pieces(metas)
    d = wrap_dim(dim, metas[keep[0]].ndim, "cat")
    grads, offset = [None] * len(tensors), 0
    for k in keep:
        size = metas[k].shape[d]
        grads[k] = e.getitem(g, (slice(None),) * d + (slice(offset, offset + size),))
        offset += size
    if len(keep) < len(tensors):
        # a skipped 1-d empty piece gets an empty gradient, as eager's cat backward gives it:
        # what it came from still gets a (zero) gradient, not None (x.var(0)[1:] of one row)
        empty = e.getitem(e.reshape(g, (math.prod(e.shape(g)),)), (slice(0, 0),))
        grads = [empty if k not in keep else grad for k, grad in enumerate(grads)]
    return {"tensors": grads}


def _narrow_vjp(e, g, out, a, dim, start, length):
    d = wrap_dim(dim, len(e.shape(a)), "narrow")
    begin = start + e.shape(a)[d] if start < 0 else start
    return {"a": e.slice_backward(g, e.shape(a), (slice(None),) * d + (slice(begin, begin + length),))}


_REGISTRY["cat"].vjp = _cat_vjp
_REGISTRY["narrow"].vjp = _narrow_vjp
