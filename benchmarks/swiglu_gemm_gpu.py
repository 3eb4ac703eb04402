"""Llama's gate / up GEMMs with SiLU-and-multiply in a Triton GEMM's epilogue, against cuBLAS.

    source benchmarks/gpu_setup.sh && python benchmarks/swiglu_gemm_gpu.py [--quick]

Exploration for issue 11 (Llama >= 1.25x Inductor): the model is GEMM-bound at cuBLAS's speed,
so a steady margin needs GEMMs that do more than cuBLAS's. Per layer, Llama's MLP runs
``silu(x @ Wg.T) * (x @ Wu.T)``: two cuBLAS GEMMs writing ``g`` and ``u`` (2 x 23 MB), then a
pointwise kernel reading both and writing the product. Here one Triton GEMM computes ``g`` and
``u`` tiles side by side -- the weights interleaved in blocks of ``BN / 2`` rows, a cached
copy as ``merge_linears`` keeps -- and writes only the product, rounding as eager does (``g``
and ``u`` to bf16, ``silu`` in fp32 rounded to bf16, the product rounded to bf16).

Rows (ms, Triton's ``do_bench`` median with L2 flush, and ``do_bench_cudagraph``: one CUDA
graph replay, as our compiled program runs):

* ``cublas+triton``: ``mm`` twice and a Triton ``silu * mul`` kernel (what ours runs today);
* ``cublas merged+triton``: one ``mm`` on the concatenated weights, then the kernel;
* ``triton plain``: the Triton GEMM without the epilogue (writes ``g | u`` interleaved), to
  compare Triton's GEMM with cuBLAS's on this shape;
* ``fused BMxBNxBK sS wW [persistent]``: the fused kernel per configuration, with its largest
  error against eager's result (relative to eager's largest magnitude).
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench, do_bench_cudagraph


@triton.jit
def _tile(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped tile order: GROUP_M row blocks share each column block (L2 reuse of W)."""
    in_group = GROUP_M * num_pid_n
    first_m = (tile // in_group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % in_group) % size_m, (tile % in_group) // size_m


@triton.jit
def _swiglu(acc, BM: tl.constexpr, BN: tl.constexpr, out_dtype: tl.constexpr):
    """The (BM, BN) accumulator holds g in columns [0, BN/2) and u in [BN/2, BN)."""
    g, u = acc.reshape(BM, 2, BN // 2).permute(0, 2, 1).split()
    g = g.to(out_dtype).to(tl.float32)
    u = u.to(out_dtype).to(tl.float32)
    s = (g / (1.0 + tl.exp(-g))).to(out_dtype).to(tl.float32)
    return (s * u).to(out_dtype)


@triton.jit
def _gemm(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr, GROUP_M: tl.constexpr, STAGES: tl.constexpr, FUSE: tl.constexpr,
          PERSISTENT: tl.constexpr, NUM_SMS: tl.constexpr, WS: tl.constexpr = False,
          FLATTEN: tl.constexpr = False):
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BK)
    start = tl.program_id(0)
    step = NUM_SMS if PERSISTENT else num_tiles
    for tile in tl.range(start, num_tiles, step, flatten=FLATTEN, warp_specialize=WS):
        pid_m, pid_n = _tile(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in tl.range(0, k_tiles, num_stages=STAGES):
            a = a_desc.load([off_m, ki * BK])
            b = b_desc.load([off_n, ki * BK])
            acc = tl.dot(a, b.T, acc)
        if FUSE:
            c_desc.store([off_m, pid_n * (BN // 2)], _swiglu(acc, BM, BN, c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _gemm_ptr(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
              BK: tl.constexpr, GROUP_M: tl.constexpr, STAGES: tl.constexpr, FUSE: tl.constexpr,
              PERSISTENT: tl.constexpr, NUM_SMS: tl.constexpr):
    """``_gemm`` with pointer loads (cp.async) instead of TMA; K a multiple of BK."""
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    start = tl.program_id(0)
    step = NUM_SMS if PERSISTENT else num_tiles
    for tile in tl.range(start, num_tiles, step):
        pid_m, pid_n = _tile(tile, num_pid_m, num_pid_n, GROUP_M)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
        b_ptrs = b_ptr + rn[:, None] * K + rk[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in tl.range(0, K, BK, num_stages=STAGES):
            a = tl.load(a_ptrs, mask=rm[:, None] < M, other=0.0)
            b = tl.load(b_ptrs, mask=rn[:, None] < N, other=0.0)
            acc = tl.dot(a, b.T, acc)
            a_ptrs += BK
            b_ptrs += BK
        if FUSE:
            ro = pid_n * (BN // 2) + tl.arange(0, BN // 2)
            c = _swiglu(acc, BM, BN, c_ptr.dtype.element_ty)
            tl.store(c_ptr + rm[:, None] * (N // 2) + ro[None, :], c,
                     mask=(rm[:, None] < M) & (ro[None, :] < N // 2))
        else:
            tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
                     mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _silu_mul(g_ptr, u_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask).to(tl.float32)
    s = (g / (1.0 + tl.exp(-g))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + offs, (s * u).to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(g, u):
    out = torch.empty_like(g)
    n = g.numel()
    _silu_mul[(triton.cdiv(n, 4096),)](g, u, out, n, BLOCK=4096, num_warps=8)
    return out


def interleave(wg, wu, half):
    """[Wg block 0; Wu block 0; Wg block 1; ...] in blocks of ``half`` rows."""
    n, k = wg.shape
    return torch.stack([wg.view(n // half, half, k), wu.view(n // half, half, k)], 1).reshape(2 * n, k)


def fused(x, w_int, n, cfg, fuse=True, sms=132, loads="tma", **flags):
    from triton.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk, stages, warps, persistent = cfg
    m, k = x.shape
    out = torch.empty(m, n if fuse else 2 * n, device=x.device, dtype=x.dtype)
    if loads == "ptr":
        tiles = triton.cdiv(m, bm) * triton.cdiv(2 * n, bn)
        grid = (min(sms, tiles) if persistent else tiles,)
        _gemm_ptr[grid](x, w_int, out, m, 2 * n, k, BM=bm, BN=bn, BK=bk, GROUP_M=8,
                        STAGES=stages, FUSE=fuse, PERSISTENT=persistent, NUM_SMS=sms,
                        num_warps=warps)
        return out
    a = TensorDescriptor(x, list(x.shape), list(x.stride()), [bm, bk])
    b = TensorDescriptor(w_int, list(w_int.shape), list(w_int.stride()), [bn, bk])
    c = TensorDescriptor(out, list(out.shape), list(out.stride()), [bm, bn // 2 if fuse else bn])
    tiles = triton.cdiv(m, bm) * triton.cdiv(2 * n, bn)
    grid = (min(sms, tiles) if persistent else tiles,)
    _gemm[grid](a, b, c, m, 2 * n, k, BM=bm, BN=bn, BK=bk, GROUP_M=8, STAGES=stages,
                FUSE=fuse, PERSISTENT=persistent, NUM_SMS=sms, num_warps=warps, **flags)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=2048)
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--n", type=int, default=5632)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--flags", action="store_true",
                        help="only the best earlier shape, with warp specialization / flatten")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16",
                        help="float16 under TRITON_INTERPRET=1 (its bf16 descriptor loads are wrong)")
    ns = parser.parse_args()
    dev, dt = ns.device, getattr(torch, ns.dtype)
    torch.manual_seed(0)
    x = torch.randn(ns.m, ns.k, device=dev, dtype=dt)
    wg = torch.randn(ns.n, ns.k, device=dev, dtype=dt) * ns.k ** -0.5
    wu = torch.randn(ns.n, ns.k, device=dev, dtype=dt) * ns.k ** -0.5
    w_cat = torch.cat([wg, wu])
    eager = F.silu(x @ wg.T) * (x @ wu.T)
    scale = eager.float().abs().max().item()
    sms = torch.cuda.get_device_properties(0).multi_processor_count if dev == "cuda" else 4
    flops = 2 * ns.m * ns.k * 2 * ns.n

    def row(name, fn, **extra):
        out = fn()
        err = (out.float() - eager.float()).abs().max().item() / scale if out.shape == eager.shape else None
        r = {"variant": name, **extra, "rel_err": err}
        if dev == "cuda":
            r["ms"] = round(do_bench(fn, warmup=25, rep=200, return_mode="median"), 4)
            r["ms_graph"] = round(do_bench_cudagraph(fn, rep=200, return_mode="median"), 4)
            r["tflops"] = round(flops / r["ms_graph"] / 1e9, 1)
        print(json.dumps(r), flush=True)
        return r

    print(json.dumps({"device": torch.cuda.get_device_name() if dev == "cuda" else dev,
                      "torch": torch.__version__, "triton": triton.__version__,
                      "shape": [ns.m, ns.k, ns.n]}), flush=True)
    row("eager", lambda: F.silu(x @ wg.T) * (x @ wu.T))
    row("cublas+triton", lambda: silu_mul(x @ wg.T, x @ wu.T))
    row("cublas merged+triton",
        lambda: (lambda gu: silu_mul(gu[:, :ns.n].contiguous(), gu[:, ns.n:].contiguous()))(x @ w_cat.T),
        note="slices copied: an upper bound")
    row("cublas gate only", lambda: x @ wg.T, note="one of the two GEMMs")
    configs = [(128, 256, 64, 3, 8, True), (128, 256, 64, 4, 8, True), (128, 128, 64, 4, 8, True),
               (128, 128, 64, 5, 4, True), (128, 256, 64, 3, 8, False), (128, 128, 64, 4, 8, False),
               (256, 128, 64, 3, 8, True), (64, 256, 64, 4, 4, True), (128, 256, 32, 5, 8, True)]
    if ns.quick or dev != "cuda":
        configs = configs[:1] if dev == "cuda" else [(32, 32, 16, 1, 4, True), (32, 64, 16, 2, 4, False)]
    best = None
    variants = [(c, "tma", {}) for c in configs] + [(c, "ptr", {}) for c in configs[:4]]
    if ns.flags:
        variants = [(c, "tma", f) for c in [(128, 256, 64, 3, 8, True), (128, 256, 64, 4, 8, True),
                                            (128, 128, 64, 4, 8, True), (128, 256, 64, 2, 8, True)]
                    for f in ({}, {"WS": True}, {"FLATTEN": True}, {"WS": True, "FLATTEN": True})]
    for cfg, loads, flags in variants:
        name = "fused {}x{}x{} s{} w{}{} {}{}".format(*cfg[:5], " persistent" if cfg[5] else "",
                                                     loads, "".join(f" {k}" for k in flags))
        try:
            w_int = interleave(wg, wu, cfg[1] // 2)
            r = row(name, lambda: fused(x, w_int, ns.n, cfg, sms=sms, loads=loads, **flags))
            if dev == "cuda" and (best is None or r["ms_graph"] < best[3]["ms_graph"]):
                best = (cfg, loads, flags, r)
        except Exception as exc:  # noqa: BLE001 - a configuration the device cannot run
            print(json.dumps({"variant": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}),
                  flush=True)
    if best is not None:
        cfg, loads, flags = best[:3]
        w_int = interleave(wg, wu, cfg[1] // 2)
        row("triton plain (best fused config)",
            lambda: fused(x, w_int, ns.n, cfg, fuse=False, sms=sms, loads=loads, **flags))


if __name__ == "__main__":
    main()
