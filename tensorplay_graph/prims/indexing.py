"""Basic-slice indexes: which dims a ``x[index]`` narrows, and whether it narrows at all.

Shared by the ``getitem`` VJP rule (a slice that keeps everything passes its gradient
through) and by the joint builder's slice-gradient folding (:mod:`..training.slices`);
it lives in ``prims`` because prims never import the training layer above them.

>>> narrowed((Ellipsis, slice(0, 2)), (3, 4)), full_index((slice(None), slice(0, None)), (3, 4))
((1,), True)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

__all__ = ["basic_slices", "full_index", "narrowed"]


def basic_slices(index: Any, rank: int) -> Optional[Tuple[slice, ...]]:
    """``index`` as one slice per dim, or None when it is not basic slicing (ints, None,
    tensors, several ellipses)."""
    items = index if isinstance(index, tuple) else (index,)
    if sum(1 for i in items if i is Ellipsis) > 1 or \
            any(not isinstance(i, slice) and i is not Ellipsis for i in items):
        return None
    if Ellipsis in items:
        at = items.index(Ellipsis)
        fill = rank - (len(items) - 1)
        if fill < 0:
            return None
        items = items[:at] + (slice(None),) * fill + items[at + 1:]
    if len(items) > rank:
        return None
    return tuple(items) + (slice(None),) * (rank - len(items))


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
