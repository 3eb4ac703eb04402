"""Programmatic dependent launch (PDL) inside a CUDA graph: what one graph edge costs with and without it.

    PYTHONPATH=$PWD python benchmarks/pdl_gpu.py [--out DIR]

Two CUDA graphs, each replayed with its Triton kernels launched plainly and with
``launch_pdl=True`` (the kernel starts with ``gdc_wait()``, so it reads nothing before the
previous kernel has finished and its writes are visible):

* ``gemm+pointwise``: 20 x (a cuBLAS 2048^3 bf16 GEMM, then a Triton kernel over its 8 MB
  output), the shape of a transformer's GEMM -> norm / activation edges;
* ``pointwise chain``: 40 Triton kernels in a row over 8 MB each.

Prints one JSON line per graph: replay ms (CUDA events, median of 50) for both launches, the
saving per PDL edge in us, and whether both gave the same result (bitwise). Measured on the
H200 (benchmarks/RESULTS.md, 2026-12-03 21:58 UTC): -0.27 us per GEMM -> kernel edge, +0.29 us
per kernel -> kernel edge, so generated kernels launch without PDL.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_wait
except ImportError:  # pragma: no cover - a Triton without grid dependency control
    gdc_wait = None


@triton.jit
def scale_add(x_ptr, out_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (x * 0.5 + 1.0).to(out_ptr.dtype.element_ty), mask=mask)


def launch(x, out, pdl):
    n = x.numel()
    block = 1024
    grid = (triton.cdiv(n, block),)
    if pdl:
        scale_add[grid](x, out, n, BLOCK=block, PDL=True, launch_pdl=True)
    else:
        scale_add[grid](x, out, n, BLOCK=block, PDL=False)


def gemm_pointwise(a, b, bufs, pdl):
    x = a
    for buf in bufs:
        y = x @ b
        launch(y, buf, pdl)
        x = buf
    return x


def chain(x, bufs, pdl):
    for buf in bufs:
        launch(x, buf, pdl)
        x = buf
    return x


def replay_ms(graph, reps=50):
    times = []
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def measure(name, body, edges):
    row = {"graph": name, "pdl_edges": edges}
    results = {}
    for pdl in (False, True):
        body(pdl)  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = body(pdl)
        row["pdl_ms" if pdl else "plain_ms"] = round(replay_ms(graph), 4)
        results[pdl] = out.clone()
    row["saving_per_edge_us"] = round((row["plain_ms"] - row["pdl_ms"]) * 1e3 / edges, 3)
    row["same_result"] = bool(torch.equal(results[False], results[True]))
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if gdc_wait is None:
        print(json.dumps({"error": "this Triton has no gdc_wait"}))
        return
    torch.manual_seed(0)
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) / 45
    bufs = [torch.empty_like(a) for _ in range(20)]
    rows = [measure("gemm+pointwise", lambda pdl: gemm_pointwise(a, b, bufs, pdl), 20)]
    bufs = [torch.empty_like(a) for _ in range(40)]
    rows.append(measure("pointwise chain", lambda pdl: chain(a, bufs, pdl), 40))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "pdl.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
