"""Basic-slice indexes: which dims a ``x[index]`` narrows, and whether it narrows at all.

``index_items`` is the index as one item per dim, for ``getitem``'s meta rule and index
map. The rest is shared by the ``getitem`` VJP rule (a slice that keeps everything passes its gradient
through) and by the joint builder's slice-gradient folding (:mod:`..training.slices`);
it lives in ``prims`` because prims never import the training layer above them.

>>> narrowed((Ellipsis, slice(0, 2)), (3, 4)), full_index((slice(None), slice(0, None)), (3, 4))
((1,), True)
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from ..errors import ShapeError

__all__ = ["basic_slices", "full_index", "index_items", "narrowed"]


def index_items(index: Any, ndim: int) -> List[Any]:
    """A basic index (ints, slices, None, one ``...``) of an ``ndim``-d tensor as one item per
    dim, plus its ``None`` items: ``...`` expanded and missing trailing dims as ``:``.
    Raises ``ShapeError`` for several ellipses or more indexed dims than ``ndim``."""
    items = list(index) if isinstance(index, tuple) else [index]
    consumed = sum(1 for it in items if it is not None and it is not Ellipsis)
    if items.count(Ellipsis) > 1 or consumed > ndim:
        raise ShapeError(f"getitem: index {index!r} is invalid for a {ndim}-d tensor")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (ndim - consumed)
    else:
        items += [slice(None)] * (ndim - consumed)
    return items


def basic_slices(index: Any, rank: int) -> Optional[Tuple[slice, ...]]:
    """``index`` as one slice per dim, or None when it is not slicing alone (ints, None,
    tensors, several ellipses)."""
    items = index if isinstance(index, tuple) else (index,)
    if any(not isinstance(i, slice) and i is not Ellipsis for i in items):
        return None
    try:
        return tuple(index_items(index, rank))
    except ShapeError:
        return None


def narrowed(index: Any, shape: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """The dims ``x[index]`` narrows for ``x`` of ``shape`` (step 1 only), or None when the
    index is anything else."""
    slices = basic_slices(index, len(shape))
    if slices is None:
        return None
    dims = []
    for d, (item, size) in enumerate(zip(slices, shape)):
        if item.step not in (None, 1):
            return None
        if item.indices(size)[:2] != (0, size):
            dims.append(d)
    return tuple(dims)


def full_index(index: Any, shape: Sequence[int]) -> bool:
    """Whether ``x[index]`` is all of ``x`` (e.g. HF's ``hidden[:, slice(0, None), :]``)."""
    return narrowed(index, shape) == ()
