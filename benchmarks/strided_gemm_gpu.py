"""The LM head's backward GEMMs on a gradient in padded rows: does cuBLAS need K padded too?

    source benchmarks/gpu_setup.sh && python benchmarks/strided_gemm_gpu.py

GPT-2's logits gradient G (4096 x 50257 bf16) times the weight W (50257 x 768), and G's
transpose times the hidden states H (4096 x 768), three ways each (median ms of CUDA-event
timings): ``strided`` -- G in rows 50264 apart, K / M = 50257 as they are (what a kernel
writing padded rows gives, ``backends/padded_rows.py``); ``padded`` -- G's zero-padded
(4096 x 50264) buffer with W padded to 50264 rows (the copy of W timed with it) or the
product's extra rows sliced off; ``contiguous`` -- G dense (the misaligned case cuBLAS runs
through alignment-1 kernels). One JSON line per GEMM, with the worst difference to the
contiguous product relative to its largest magnitude.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from bench_modes import median_ms  # noqa: E402


def main():
    rows, cols, width = 4096, 50257, 768
    pitch = cols + (-cols % 8)
    buffer = torch.zeros(rows, pitch, device="cuda", dtype=torch.bfloat16)
    buffer[:, :cols] = torch.randn(rows, cols, device="cuda").to(torch.bfloat16)
    strided, dense = buffer[:, :cols], buffer[:, :cols].contiguous()
    w = torch.randn(cols, width, device="cuda").to(torch.bfloat16)
    h = torch.randn(rows, width, device="cuda").to(torch.bfloat16)
    f = torch.nn.functional
    cases = {
        "G @ W": {"strided": lambda: strided @ w,
                  "padded": lambda: buffer @ f.pad(w, (0, 0, 0, pitch - cols)),
                  "contiguous": lambda: dense @ w},
        "G.t() @ H": {"strided": lambda: strided.t() @ h,
                      "padded": lambda: (buffer.t() @ h)[:cols],
                      "contiguous": lambda: dense.t() @ h},
    }
    for name, ways in cases.items():
        want = ways["contiguous"]().float()
        row = {"gemm": name}
        for way, call in ways.items():
            row[f"{way}_ms"] = round(median_ms(call, reps=50), 4)
            err = (call().float() - want).abs().max() / want.abs().max()
            row[f"{way}_rel_err"] = float(f"{err:.2e}")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
