"""GPT-2's LM head written straight into eager's layout: a Triton GEMM against cuBLAS + copy.

    source benchmarks/gpu_setup.sh && python benchmarks/lm_head_direct_gpu.py

``F.linear(h, W)`` with h 4096 x 768 and W 50257 x 768, bf16: the result's rows (50257
elements) are not 16-byte aligned, so cuBLAS falls back to a slow kernel. Ways to write eager's
layout anyway: ``padded`` (the aligned product in rows padded to 50264, the first 50257
columns copied out), ``interleaved`` (``aligned_linear.interleaved_linear``: one aligned GEMM
per class of rows sharing an alignment), and Triton GEMMs storing their tiles straight into
the misaligned rows (loads aligned: W padded once); the aligned product without the copy is
the floor. One JSON line per way: median ms (CUDA events), worst difference to the fp32
product relative to its largest magnitude.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_modes import use_cache_root  # noqa: E402

use_cache_root("tpg_lmdirect_")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from bench_modes import median_ms  # noqa: E402
from tensorplay_graph.backends.aligned_linear import first_columns, interleaved_linear  # noqa: E402


@triton.jit
def _direct_mm(a_ptr, w_ptr, c_ptr, M, N, K: tl.constexpr, PITCH: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
               STAGES: tl.constexpr):
    """C[m, n] = sum_k A[m, k] * W[n, k]; A is M x K, W is (N rounded up) x K, C has rows of
    PITCH elements (not 16-byte aligned)."""
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    group = GROUP_M * grid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_rows = a_ptr + rm[:, None].to(tl.int64) * K + rk[None, :]
    w_rows = w_ptr + (rn % N)[None, :].to(tl.int64) * K + rk[:, None]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a = tl.load(a_rows + k)
        b = tl.load(w_rows + k)
        acc = tl.dot(a, b, acc)
    c = acc.to(c_ptr.dtype.element_ty)
    out = c_ptr + rm[:, None].to(tl.int64) * PITCH + rn[None, :]
    tl.store(out, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _direct_mm_tma(a_desc, w_desc, c_ptr, M, N, K: tl.constexpr, PITCH: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                   STAGES: tl.constexpr):
    """As :func:`_direct_mm`, operands loaded by TMA descriptors."""
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BM)
    grid_n = tl.cdiv(N, BN)
    group = GROUP_M * grid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, num_stages=STAGES):
        a = a_desc.load([pid_m * BM, k])
        b = w_desc.load([pid_n * BN, k])
        acc = tl.dot(a, b.T, acc)
    c = acc.to(c_ptr.dtype.element_ty)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    out = c_ptr + rm[:, None].to(tl.int64) * PITCH + rn[None, :]
    tl.store(out, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


CONFIGS = [  # BM, BN, BK, warps, stages: the best two of six tried on 2026-12-03
    (128, 256, 64, 8, 4), (128, 128, 64, 8, 4),
]


def main():
    from triton.tools.tensor_descriptor import TensorDescriptor
    torch.manual_seed(0)
    F = torch.nn.functional
    M, K, N = 4096, 768, 50257
    h = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    wp = F.pad(w, (0, 0, 0, 7)).contiguous()
    want = (h.float() @ w.float().t())
    scale = want.abs().max()
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)

    def report(name, call, result):
        call()
        err = float((result().float() - want).abs().max() / scale)
        print(json.dumps({"way": name, "ms": round(median_ms(call, reps=50), 4),
                          "rel_err": float(f"{err:.2e}")}), flush=True)

    def padded():  # the way before: the aligned product and a copy out of its padded rows
        return first_columns(F.linear(h, wp), N)

    report("padded (cuBLAS + copy)", padded, padded)
    pad_out = torch.empty(M, N + 7, device="cuda", dtype=torch.bfloat16)
    report("cuBLAS into padded rows, no copy", lambda: torch.mm(h, wp.t(), out=pad_out),
           lambda: pad_out[:, :N])
    report("interleaved (ours: 8 aligned cuBLAS GEMMs + edges)",
           lambda: interleaved_linear(h, w, None, N), lambda: interleaved_linear(h, w, None, N))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        interleaved_linear(h, w, None, N)
        torch.cuda.synchronize()
    print(json.dumps({"kernels": [(e.key[:80], e.count, round(e.device_time_total / 1e3, 4))
                                  for e in prof.key_averages() if e.device_time_total > 0]}))
    for bm, bn, bk, warps, stages in CONFIGS:
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

        def ptr(bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, grid=grid):
            _direct_mm[grid](h, wp, c, M, N, K, N, bm, bn, bk, 8, stages, num_warps=warps,
                             num_stages=stages)

        a_desc = TensorDescriptor.from_tensor(h, [bm, bk])
        w_desc = TensorDescriptor.from_tensor(wp, [bn, bk])

        def tma(bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, grid=grid, a=a_desc, b=w_desc):
            _direct_mm_tma[grid](a, b, c, M, N, K, N, bm, bn, bk, 8, stages, num_warps=warps,
                                 num_stages=stages)

        for name, call in (("ptr", ptr), ("tma", tma)):
            try:
                report(f"triton {name} {bm}x{bn}x{bk} w{warps} s{stages}", call, lambda: c)
            except Exception as exc:  # a config the compiler refuses: say so, go on
                print(json.dumps({"way": f"triton {name} {bm}x{bn}x{bk}",
                                  "error": str(exc)[:300]}), flush=True)


if __name__ == "__main__":
    main()
