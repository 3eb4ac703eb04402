"""Which Triton spellings keep CUDA eager's special values on a real GPU compile (H200).

    python benchmarks/triton_special_values_gpu.py

Triton's interpreter (the CPU tests) follows numpy, so a spelling it accepts may still lose a
sign of zero or fold a NaN cast once LLVM compiles it. Each row compiles one small kernel and
prints whether it equals torch's CUDA eager bit for bit, and whether the kernel's LLVM IR
carries fast-math flags that ignore signed zeros (``nsz``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _div_neg_zero_literal(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, x / -0.0, mask=i < n)


@triton.jit
def _div_neg_zero_bits(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    z = tl.full([BLOCK], -2147483648, tl.int32).to(tl.float32, bitcast=True)
    tl.store(o_ptr + i, x / z, mask=i < n)


@triton.jit
def _div_neg_zero_mul(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, x / (0.0 * -1.0), mask=i < n)


@triton.jit
def _where_neg_zero_literal(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, tl.where(x > 0, -0.0, 0.5), mask=i < n)


@triton.jit
def _where_neg_zero_bits(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    z = tl.full([BLOCK], -2147483648, tl.int32).to(tl.float32, bitcast=True)
    tl.store(o_ptr + i, tl.where(x > 0, z, 0.5), mask=i < n)


@triton.jit
def _neg(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, -x, mask=i < n)


@triton.jit
def _neg_mul(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, x * -1.0, mask=i < n)


@triton.jit
def _relu_where_le(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, tl.where(x <= 0, 0, x), mask=i < n)


@triton.jit
def _relu_maximum(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL), mask=i < n)


@triton.jit
def _nan_times_to_int(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, (float("nan") * x).to(tl.int32), mask=i < n)


@triton.jit
def _nan_times_to_int_guarded(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    v = float("nan") * x
    tl.store(o_ptr + i, tl.where(v != v, 0, v).to(tl.int32), mask=i < n)


@triton.jit
def _to_int(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(o_ptr + i, x.to(tl.int32), mask=i < n)


@triton.jit
def _pow_exp2(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    y = tl.load(y_ptr + i, mask=i < n)
    tl.store(o_ptr + i, tl.exp2(y * tl.log2(tl.abs(x))), mask=i < n)


@triton.jit
def _pow_libdevice(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    y = tl.load(y_ptr + i, mask=i < n)
    tl.store(o_ptr + i, libdevice.pow(x, y), mask=i < n)


def _same(a, b):
    a, b = a.cpu(), b.cpu()
    if a.dtype.is_floating_point:
        return bool(((a == b) & (torch.signbit(a) == torch.signbit(b)) | (a.isnan() & b.isnan())).all())
    return bool((a == b).all())


def main():
    dev = "cuda"
    x = torch.tensor([1.5, -2.0, 0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3e9, -3e9, 7.0],
                     device=dev)
    n = x.numel()
    rows = []

    def run(name, kernel, want, out_dtype=torch.float32, extra=()):
        out = torch.empty(n, device=dev, dtype=out_dtype)
        compiled = kernel[(1,)](x, *extra, out, n, BLOCK=16)
        llir = compiled.asm.get("llir", "")
        ok = _same(want, out)
        rows.append((name, ok, "nsz" in llir, out.cpu().tolist(), want.cpu().tolist()))

    run("x / -0.0 literal", _div_neg_zero_literal, x / -0.0)
    run("x / -0.0 from int bits", _div_neg_zero_bits, x / -0.0)
    run("x / (0.0 * -1.0)", _div_neg_zero_mul, x / -0.0)
    run("where(x > 0, -0.0, 0.5) literal", _where_neg_zero_literal, torch.where(x > 0, -0.0, 0.5))
    run("where(x > 0, -0.0, 0.5) int bits", _where_neg_zero_bits, torch.where(x > 0, -0.0, 0.5))
    run("-x", _neg, -x)
    run("x * -1.0", _neg_mul, -x)
    run("relu: where(x <= 0, 0, x)", _relu_where_le, torch.relu(x))
    run("relu: maximum(x, 0.0)", _relu_maximum, torch.relu(x))
    run("(nan * x).to(int32)", _nan_times_to_int, (float("nan") * x).int(), torch.int32)
    run("(nan * x) guarded .to(int32)", _nan_times_to_int_guarded, (float("nan") * x).int(), torch.int32)
    run("x.to(int32)", _to_int, x.int(), torch.int32)
    g = torch.Generator().manual_seed(0)
    base = (torch.rand(n, generator=g) * 8).to(dev)
    expo = (torch.rand(n, generator=g) * 12).to(dev)
    for name, kernel in (("pow exp2/log2", _pow_exp2), ("pow libdevice", _pow_libdevice)):
        out = torch.empty(n, device=dev)
        kernel[(1,)](base, expo, out, n, BLOCK=16)
        want = base ** expo
        ulps = ((out - want).abs() / torch.finfo(torch.float32).eps / want.abs()).max().item()
        rows.append((name, _same(want, out), None, f"max error {ulps:.1f} ulp", ""))
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for name, ok, nsz, got, want in rows:
        print(f"{'ok  ' if ok else 'DIFF'} {name:36s} nsz={nsz} got={got} eager={want}")


if __name__ == "__main__":
    main()
