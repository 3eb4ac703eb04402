"""Kernel outputs written straight into zero-padded rows, for the misaligned GEMMs reading them.

GPT-2's LM-head backward multiplies the logits gradient (4096 x 50257 bf16) by the weight and
its transpose by the hidden states; both GEMMs need the gradient in rows padded to a multiple
of 8 elements (:mod:`.aligned_gemm`), and a copy into such rows cost 0.47 ms and 394 MB of
every training step on the H200. When the gradient is a generated kernel's output read only
by those GEMMs (through views), the kernel can write it into the padded rows itself: the
output is allocated as the first ``width`` columns of a ``(rows, pitch)`` buffer whose last
``pitch - width`` columns are zeroed per call, and the GEMMs take the whole buffer.

A plan accepts the request through ``pad_rows(index, width, pitch) -> bool`` (Triton's
pointwise and indexed plans); nothing changes when it declines.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

from ..frameworks import adapter_for
from ..ir.meta import contiguous_strides

Shape = Tuple[int, ...]


def trailing_split(shape: Sequence[int], width: int) -> Optional[int]:
    """The first dim ``k`` such that the dims from ``k`` on hold ``width`` elements (the
    padded matrix's row), or None."""
    count = 1
    for k in range(len(shape) - 1, -1, -1):
        count *= shape[k]
        if count == width:
            return k
        if count > width:
            return None
    return None


def padded_strides(shape: Sequence[int], k: int, pitch: int) -> Shape:
    """Row-major strides of ``shape`` whose rows (dims ``k`` on) lie ``pitch`` elements apart."""
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, k - 1, -1):
        strides[d] = step
        step *= shape[d]
    step = pitch
    for d in range(k - 1, -1, -1):
        strides[d] = step
        step *= shape[d]
    return tuple(strides)


def rows_layout(shape: Sequence[int], strides: Sequence[int], width: int, pitch: int
                ) -> Optional[Tuple[int, Shape]]:
    """``(k, padded strides)`` when an output of ``shape`` written row-major with ``strides``
    can be written into rows of ``pitch`` instead, else None."""
    k = trailing_split(shape, width)
    if k is None or k == 0 or pitch <= width or tuple(strides) != contiguous_strides(tuple(shape)):
        return None
    return k, padded_strides(shape, k, pitch)


def padded_empty(shape: Shape, strides: Shape, width: int, pitch: int, dtype: Any,
                 device: Any) -> Any:
    """An uninitialized tensor of ``shape`` with ``strides`` (:func:`padded_strides`): the first
    ``width`` columns of a ``(rows, pitch)`` buffer whose other columns are zero."""
    torch = adapter_for("torch").module
    rows = 1
    for n in shape:
        rows *= n
    rows //= width
    buffer = torch.empty((rows, pitch), dtype=dtype, device=device)
    buffer[:, width:].zero_()
    return buffer.as_strided(shape, strides)
