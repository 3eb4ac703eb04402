"""Linear layers with a misaligned number of outputs, computed through aligned cuBLAS GEMMs.

A linear layer with an odd number of outputs (GPT-2's LM head: 50257) gives cuBLAS an output
leading dimension of 50257 bf16 elements, so it falls back to an alignment-1 kernel: 3.36 ms
of GPT-2's 4.8 ms call on the H200 (``benchmarks/profile_gpu.py``, benchmarks/RESULTS.md).
Writing into padded rows through ``out=`` did not help (measured: cuBLAS still saw the odd
width). When K is aligned, :func:`interleaved_linear` writes eager's layout directly: every
8th row starts at the same alignment, so each such class of rows is one aligned GEMM, and a
small GEMM fills the few edge columns. Otherwise (and when autograd records the call, which
``out=`` does not support) as Inductor's ``pad_mm`` does: the weight gets zero rows up to a
multiple of 8 outputs, the product is computed with aligned rows and the first N columns are
copied out contiguous (row by row: :mod:`.row_copy`). Either way: eager's layout, values
within bf16 GEMM rounding. A weight from the program's state is then padded once
(:class:`PaddedRowsWeight`, refreshed in place when the parameter changes, before a CUDA-graph
replay too; Inductor pads it on every call: 0.034 ms of GPT-2's LM head on the H200); a weight
computed in the program is padded per call. :mod:`.aligned_gemm` decides which linears take
this path.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ..cached_weight import CachedWeight, same_kind
from ..frameworks import adapter_for
from .row_copy import copy_rows

ALIGN = 8  # elements: 16 bytes of float16 / bfloat16


def _padded_rows(weight: Any) -> Any:
    """``weight`` with zero rows up to a multiple of :data:`ALIGN` (differentiable)."""
    F = adapter_for("torch").functional()
    return F.pad(weight, (0, 0, 0, padding(weight.shape[0])))


class PaddedRowsWeight(CachedWeight):
    """A linear weight's copy with zero rows up to :data:`ALIGN` outputs, made once and
    refreshed in place when the parameter changes (:mod:`..cached_weight`)."""

    eager_reason = ("linear weight with zero rows up to an aligned width: a cached copy, "
                    "refreshed when the parameter changes (aligned_linear)")

    def convert(self, weight: Any) -> Any:
        return _padded_rows(weight)

    def refill(self, buffer: Any, weight: Any) -> bool:
        n = weight.shape[0]
        if tuple(buffer.shape) != (n + padding(n), *weight.shape[1:]) or \
                not same_kind(buffer, weight):
            return False
        buffer[:n].copy_(weight)  # the zero rows stay zero
        return True


def padded_linear(a: Any, weight: Any, bias: Any = None) -> Any:
    """``F.linear(a, weight, bias)`` through a weight padded to :data:`ALIGN` output rows."""
    out = interleaved_linear(a, weight, bias, weight.shape[0])
    if out is not None:
        return out
    return padded_weight_linear(a, _padded_rows(weight), bias, weight.shape[0])


def padded_weight_linear(a: Any, padded: Any, bias: Any, n: int) -> Any:
    """``F.linear(a, weight, bias)`` given ``padded``: the (n, K) ``weight`` with zero rows
    appended (:class:`PaddedRowsWeight`, which the rewrite inserts only for a misaligned K,
    where :func:`interleaved_linear` does not apply)."""
    F = adapter_for("torch").functional()
    if bias is not None:
        bias = F.pad(bias, (0, padded.shape[0] - n))
    return first_columns(F.linear(a, padded, bias), n)


def interleaved_linear(a: Any, weight: Any, bias: Any, n: int) -> Optional[Any]:
    """``F.linear(a, weight[:n], bias)`` computed straight into eager's contiguous layout, or
    None where that does not apply (a differentiated call, K off the alignment, operands
    cuBLAS would not read in place, fewer than 16 columns).

    Rows of ``n`` elements start at every alignment, but every ``p``-th row (``p = 8 /
    gcd(n, 8)``) starts at the same one: such a class of rows is a matrix with the aligned row
    pitch ``p * n`` once its columns start at the next aligned address. One cuBLAS GEMM per
    class writes it in place (``out=``, leading dimension ``p * n``); the at most 7 columns at
    each end that a class leaves out come from one small GEMM. GPT-2's LM head (4096 x 768 @
    50257 x 768, bf16, H200): 0.594 ms, against 0.737 for the padded product and its copy
    (``benchmarks/lm_head_direct_gpu.py``)."""
    torch = adapter_for("torch").module
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (a, weight, bias)):
        return None  # ``out=`` does not record for autograd
    k = a.shape[-1]
    flat = a.reshape(-1, k)
    if (k % ALIGN or n % ALIGN == 0 or n < 2 * ALIGN or flat.stride() != (k, 1)
            or weight.stride() != (k, 1) or flat.data_ptr() % (2 * ALIGN) or weight.data_ptr() % (2 * ALIGN)
            or weight.dtype != a.dtype):
        return None
    m = flat.shape[0]
    out = torch.empty((*a.shape[:-1], n), dtype=a.dtype, device=a.device)
    cells = out.view(-1)
    period = ALIGN // math.gcd(n, ALIGN)
    lo, hi = 0, n  # the columns every class covers
    for first in range(min(period, m)):
        shift = -first * n % ALIGN
        width = (n - shift) // ALIGN * ALIGN
        rows = flat[first::period]
        dst = cells.as_strided((rows.shape[0], width), (period * n, 1), first * n + shift)
        _gemm_into(torch, dst, rows, weight[shift:shift + width], bias, shift)
        lo, hi = max(lo, shift), min(hi, shift + width)
    edges = torch.cat([weight[:lo], weight[hi:n]])
    part = torch.empty((m, edges.shape[0]), dtype=a.dtype, device=a.device)
    edge_bias = None if bias is None else torch.cat([bias[:lo], bias[hi:n]])
    _gemm_into(torch, part, flat, edges, edge_bias, 0)
    rows_out = out.view(m, n)
    rows_out[:, :lo].copy_(part[:, :lo])
    rows_out[:, hi:].copy_(part[:, lo:])
    return out


def _gemm_into(torch: Any, dst: Any, rows: Any, weight: Any, bias: Any, first_column: int) -> None:
    """``dst = rows @ weight.T (+ bias[first_column:][:width])`` in place."""
    if bias is None:
        torch.mm(rows, weight.t(), out=dst)
    else:
        torch.addmm(bias[first_column:first_column + dst.shape[1]], rows, weight.t(), out=dst)


def first_columns(out: Any, n: int) -> Any:
    """A contiguous copy of ``out[..., :n]`` (eager's layout for the unpadded product)."""
    torch = adapter_for("torch").module
    result = torch.empty((*out.shape[:-1], n), dtype=out.dtype, device=out.device)
    copy_rows(result.view(-1, n), out.reshape(-1, out.shape[-1])[:, :n])
    return result


def padding(extent: int) -> int:
    """Elements that bring ``extent`` up to a multiple of :data:`ALIGN`."""
    return -extent % ALIGN
