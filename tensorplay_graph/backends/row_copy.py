"""Row-by-row copies between matrices whose rows are not 16-byte aligned.

The padded GEMMs (:mod:`.aligned_gemm`) copy GPT-2's logits (4096 x 50257 bf16, 412 MB) out
of rows padded to 50264: torch's copy of such a strided matrix computes every element's
address through div / mod (``elementwise_kernel``: 0.49 ms on the H200). :func:`copy_rows`
launches one Triton program per row block instead (a row's address is one multiply, the
strides are constants): 0.33 ms. Only that direction: into padded rows (the unaligned side
read) the kernel took 1.0 ms, torch's copy 0.5. Anything else (that direction, CPU tensors,
no Triton, other layouts) is ``dst.copy_(src)``.

>>> copy_rows(padded[:, :50257], logits)          # doctest: +SKIP
"""

from __future__ import annotations

import functools
from typing import Any, Optional

BLOCK = 1024


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

    return copy_rows_kernel


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
    kernel = _kernel() if _fits(dst, src) else None
    if kernel is None:
        return dst.copy_(src)
    rows, cols = dst.shape
    grid = (rows, (cols + BLOCK - 1) // BLOCK)
    kernel[grid](src, dst, cols, src.stride(0), dst.stride(0), BLOCK=BLOCK, num_warps=4)
    return dst
