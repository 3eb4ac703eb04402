"""Basic-slice indexes: which one dim a ``x[index]`` narrows, and whether it narrows at all.

The joint builder uses these to avoid the eager scatter of a slice's gradient: a slice that
keeps everything passes its gradient through, and gradients of slices that tile one dim
(``x[..., :h]`` and ``x[..., h:]`` in ``rotate_half``) become one ``cat``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

__all__ = ["full_index", "narrowed", "slice_span"]


def _expand(index: Any, rank: int) -> Optional[Tuple[slice, ...]]:
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
    slices = _expand(index, len(shape))
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


def slice_span(node: Any) -> Optional[Tuple[int, int, int]]:
    """``(dim, start, stop)`` when ``node`` scatters a gradient into one dim's range of zeros
    (an ``Emitter.slice_backward`` node of a basic slice along one dim), else None."""
    from ..prims.emit import slice_backward
    if getattr(node, "target", None) is not slice_backward:
        return None
    _, shape, index = node.args
    dims = narrowed(index, shape)
    if dims is None or len(dims) != 1:
        return None
    dim = dims[0]
    start, stop, _ = _expand(index, len(shape))[dim].indices(shape[dim])
    return (dim, start, stop) if stop > start else None
