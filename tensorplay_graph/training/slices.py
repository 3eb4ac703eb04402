"""Slice gradients along one dim, for the joint builder.

Gradients of slices that tile one dim (``x[..., :h]`` and ``x[..., h:]`` in
``rotate_half``) become one ``cat`` instead of eager scatters; the index arithmetic
(:func:`~tensorplay_graph.prims.indexing.narrowed`) lives in ``prims``, beside the
``getitem`` VJP rule that also needs it.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ..prims.emit import slice_backward
from ..prims.indexing import basic_slices, narrowed

__all__ = ["slice_span"]


def slice_span(node: Any) -> Optional[Tuple[int, int, int]]:
    """``(dim, start, stop)`` when ``node`` scatters a gradient into one dim's range of zeros
    (an ``Emitter.slice_backward`` node of a basic slice along one dim), else None."""
    if getattr(node, "target", None) is not slice_backward:
        return None
    _, shape, index = node.args
    dims = narrowed(index, shape)
    if dims is None or len(dims) != 1:
        return None
    dim = dims[0]
    start, stop, _ = basic_slices(index, len(shape))[dim].indices(shape[dim])
    return (dim, start, stop) if stop > start else None
