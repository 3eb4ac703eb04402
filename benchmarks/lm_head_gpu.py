"""GPT-2's LM head on the GPU: how each way of computing ``F.linear(h, W)`` with 50257 outputs
(rows not 16-byte aligned) performs, and what layout its result has.

    source benchmarks/gpu_setup.sh && python benchmarks/lm_head_gpu.py

h is 4096 x 768, W is 50257 x 768, bf16. Ways: ``eager`` (cuBLAS on the misaligned output),
``padded`` (ours: ``aligned_linear.padded_linear``, W padded to 50264 rows, the product's
first 50257 columns copied out), ``inductor`` (``torch.compile``), ``nn_contiguous``
(``h @ W.t().contiguous()``, the transposed weight prepared once, not timed). One JSON line
per way: median ms (CUDA events), the result's strides, its worst difference to eager
relative to eager's largest magnitude, and for Inductor the kernels of one call
(torch.profiler).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_modes import use_cache_root  # noqa: E402

use_cache_root("tpg_lmhead_")

import torch  # noqa: E402

from bench_modes import median_ms  # noqa: E402
from tensorplay_graph.backends.aligned_linear import padded_linear  # noqa: E402


def main():
    torch.manual_seed(0)
    F = torch.nn.functional
    h = torch.randn(4096, 768, device="cuda").to(torch.bfloat16)
    w = torch.randn(50257, 768, device="cuda").to(torch.bfloat16)
    wt = w.t().contiguous()
    compiled = torch.compile(lambda h, w: F.linear(h, w))
    ways = {"eager": lambda: F.linear(h, w), "padded": lambda: padded_linear(h, w),
            "inductor": lambda: compiled(h, w), "nn_contiguous": lambda: h @ wt}
    want = F.linear(h, w).float()
    for name, call in ways.items():
        out = call()
        row = {"way": name, "ms": round(median_ms(call, reps=30), 4), "stride": list(out.stride()),
               "rel_err": float(f"{((out.float() - want).abs().max() / want.abs().max()):.2e}")}
        if name == "inductor":
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                call()
                torch.cuda.synchronize()
            row["kernels"] = [(e.key[:90], round(e.device_time_total / 1e3, 4))
                              for e in prof.key_averages() if e.device_time_total > 0]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
