"""Copies out of padded rows into rows that are not 16-byte aligned.

The padded GEMMs (:mod:`.aligned_gemm`) copy GPT-2's logits (4096 x 50257 bf16, 412 MB) out
of rows padded to 50264: torch's copy of such a strided matrix computes every element's
address through div / mod by runtime sizes (``elementwise_kernel``: 0.47 ms on the H200).
Here, when the destination is contiguous (its rows follow one another, as a fresh result's
do), each program takes ``FLAT_BLOCK`` consecutive destination elements -- aligned, vectorized
stores -- and finds their source through a division by the row width, a compile-time constant
(a multiply and a shift): 0.201 ms, 98% of a contiguous copy of the same bytes, where one
program per row block (a row's address one multiply, its stores misaligned) took 0.27 ms
(benchmarks/RESULTS.md). That row-block kernel still serves destinations with padded rows.
Only that direction: into padded rows (the unaligned side read) the row-block kernel took
1.0 ms, torch's copy 0.5. Anything else (that direction, CPU tensors, no Triton, other
layouts) is ``dst.copy_(src)``.

>>> copy_rows(padded[:, :50257], logits)          # doctest: +SKIP
"""

from __future__ import annotations

import functools
from typing import Any, Optional

BLOCK = 1024
#: destination elements per program of the flat kernel (4 warps; measured best on the H200)
FLAT_BLOCK = 4096
_WIDE = 2 ** 31  # element offsets from here on need 64 bits


@functools.lru_cache(maxsize=None)
def _kernel() -> Optional[Any]:
    try:
        import triton
        import triton.language as tl
    except ImportError:  # pragma: no cover - the GPU image ships Triton
        return None

    @triton.jit
    def copy_rows_kernel(src, dst, n_cols, src_stride: tl.constexpr, dst_stride: tl.constexpr,
                         BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        value = tl.load(src + row * src_stride + cols, mask=mask)
        tl.store(dst + row * dst_stride + cols, value, mask=mask)

    @triton.jit
    def copy_flat_kernel(src, dst, total, WIDTH: tl.constexpr, PITCH: tl.constexpr,
                         WIDE: tl.constexpr, BLOCK: tl.constexpr):
        if WIDE:
            i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        else:
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = i < total
        row = i // WIDTH
        value = tl.load(src + row * PITCH + (i - row * WIDTH), mask=mask)
        tl.store(dst + i, value, mask=mask)

    return copy_rows_kernel, copy_flat_kernel


def _fits(dst: Any, src: Any) -> bool:
    from .triton.plan import interpreting
    # Only out of aligned rows into misaligned ones: the other way the kernel's unaligned
    # loads made it half as fast as torch's copy (H200, benchmarks/row_copy_gpu.py)
    return (dst.dim() == 2 and src.dim() == 2 and dst.stride(0) % 8 != 0
            and src.stride(0) % 8 == 0 and tuple(dst.shape) == tuple(src.shape) and dst.dtype == src.dtype
            and dst.device == src.device and dst.stride(1) == 1 and src.stride(1) == 1
            and dst.numel() > 0 and (dst.is_cuda or interpreting()))


def copy_rows(dst: Any, src: Any) -> Any:
    """``dst.copy_(src)`` for 2-D matrices with unit column stride (rows may be padded or
    misaligned), through :func:`_kernel` on CUDA (and in Triton's interpreter); returns dst."""
    kernels = _kernel() if _fits(dst, src) else None
    if kernels is None:
        return dst.copy_(src)
    rows, cols = dst.shape
    if dst.stride(0) == cols:  # contiguous: the flat kernel
        total = rows * cols
        wide = max(rows * src.stride(0), total) >= _WIDE  # 32-bit offsets where all fit
        grid = ((total + FLAT_BLOCK - 1) // FLAT_BLOCK,)
        kernels[1][grid](src, dst, total, WIDTH=cols, PITCH=src.stride(0), WIDE=wide,
                         BLOCK=FLAT_BLOCK, num_warps=4)
        return dst
    grid = (rows, (cols + BLOCK - 1) // BLOCK)
    kernels[0][grid](src, dst, cols, src.stride(0), dst.stride(0), BLOCK=BLOCK, num_warps=4)
    return dst
