"""The cross-entropy training step's logit gradient, walked flat or by rows, against Inductor.

    source benchmarks/gpu_setup.sh && python benchmarks/loss_walk_gpu.py

``F.cross_entropy(logits.float(), target)`` forward + backward on bf16 logits of GPT-2's
(4096 x 50257: two-level rows, the gradient written into padded rows) and Llama's (2048 x
32000) training steps. Modes: ``rows`` (``tensorplay_graph.compile``, the indexed kernels'
row walk, ``codegen_indexed.ROW_WALK_MIN``), ``flat`` (the same with the row walk off),
``inductor`` (``torch.compile``) and ``eager``. Per row: median ms of a step (CUDA events),
the three longest kernels and their ms (torch.profiler, one step), the worst gradient
difference to eager relative to eager's largest magnitude. One JSON line per (shape, mode).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_modes import median_ms, run_meta, use_cache_root  # noqa: E402

use_cache_root("tpg_losswalk_")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.triton import codegen_indexed  # noqa: E402

SHAPES = {"gpt2": (4096, 50257), "llama": (2048, 32000)}


def loss(logits, target):
    return F.cross_entropy(logits.float(), target)


def compiled(mode):
    if mode == "eager":
        return loss
    if mode == "inductor":
        return torch.compile(loss)
    codegen_indexed.ROW_WALK_MIN = 4096 if mode == "rows" else 1 << 62
    return tpg.compile(loss)


def _top_kernel(step):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                     key=lambda e: -e.device_time)
    return [(e.name[:50], round(e.device_time / 1e3, 4)) for e in kernels[:3]]


def main():
    print(json.dumps(run_meta()), flush=True)
    for name, (rows, classes) in SHAPES.items():
        torch.manual_seed(0)
        base = torch.randn(rows, classes, device="cuda", dtype=torch.bfloat16) * 3
        target = torch.randint(0, classes, (rows,), device="cuda")
        logits = base.clone().requires_grad_()
        loss(logits, target).backward()
        want = logits.grad.float()
        for mode in ("eager", "inductor", "flat", "rows"):
            fn = compiled(mode)
            logits = base.clone().requires_grad_()

            def step():
                logits.grad = None
                fn(logits, target).backward()
            step()
            err = float((logits.grad.float() - want).abs().max() / want.abs().max())
            ms = median_ms(step, 50)
            print(json.dumps({"shape": name, "mode": mode, "ms": round(ms, 4),
                              "top_kernels_ms": _top_kernel(step),
                              "grad_rel_err": err}), flush=True)


if __name__ == "__main__":
    main()
