"""Kernel outputs with eager's strides, so views, copies and aliasing match eager.

A generated kernel writes a fresh contiguous tensor, but eager's TensorIterator keeps
its input's layout (torch: ``where(c, x_t, 0)`` of a transposed ``x_t`` is transposed;
TensorPlay's pointwise results are contiguous). Layout is observable: ``reshape`` is a
view of a contiguous tensor and a copy of a permuted one, ``contiguous()`` returns
``self`` or a copy, so a later in-place write reaches a different set of tensors.

``lower`` therefore follows every region output whose recorded eager strides (capture
measured them on the example inputs: ``TensorMeta.stride``) are not row-major by a
``to_eager_layout(value, stride)`` node; the contiguous common case gets no node and
no copy, and neither does an output its kernel already wrote with those strides (Triton's
pointwise kernels: ``Kernel.launch["eager_strides"]``).

>>> needs_eager_layout(TensorMeta((2, 3), "float32", stride=(1, 2)))   # doctest: +SKIP
True
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from ..frameworks import framework_of
from ..ir.meta import permuted_strides

__all__ = ["needs_eager_layout", "to_eager_layout"]


def needs_eager_layout(meta: Any) -> Optional[Tuple[int, ...]]:
    """Eager's strides for a kernel output with ``meta``, or None when row-major ones do
    (:func:`~tensorplay_graph.ir.meta.permuted_strides`: exact comparison, size-1 dims
    included -- torch's overlap check for in-place ops compares full strides)."""
    return permuted_strides(meta)


def to_eager_layout(value: Any, stride: Tuple[int, ...]) -> Any:
    """``value`` if it already has ``stride``; else a copy of it laid out with ``stride``."""
    if framework_of(value) is None or len(value.shape) != len(stride) or \
            tuple(value.stride()) == stride:
        return value
    out = type(value).new_empty_strided(value, tuple(value.shape), stride)
    out.copy_(value)
    return out

