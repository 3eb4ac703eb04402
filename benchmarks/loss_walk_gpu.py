"""The cross-entropy training step's logit gradient, walked flat or by rows, against Inductor.

    source benchmarks/gpu_setup.sh && python benchmarks/loss_walk_gpu.py

``F.cross_entropy(logits.float(), target)`` forward + backward on bf16 logits of GPT-2's
(4096 x 50257: two-level rows) and Llama's (2048 x 32000) training steps; ``gpt2_head``: the
logits from GPT-2's LM head (``h @ W.T``, 4096 x 768 and 50257 x 768, both requiring grad),
so the logit gradient is written into padded rows for the head's misaligned GEMMs. Modes: ``rows`` (``tensorplay_graph.compile``, the indexed kernels'
row walk, ``codegen_indexed.ROW_WALK_MIN``), ``flat`` (the same with the row walk off),
``inductor`` (``torch.compile``) and ``eager``. Per row: median ms of a step (CUDA events),
the three longest kernels and their ms (torch.profiler, one step), the worst gradient
difference to eager relative to eager's largest magnitude. One JSON line per (shape, mode).
"""

from __future__ import annotations

import argparse
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

SHAPES = {"gpt2": (4096, 50257), "llama": (2048, 32000), "gpt2_head": (4096, 50257)}
HIDDEN = 768


def loss(logits, target):
    return F.cross_entropy(logits.float(), target)


def head_loss(h, weight, target):
    return F.cross_entropy((h @ weight.t()).float(), target)


def compiled(mode, fn):
    if mode == "eager":
        return fn
    if mode == "inductor":
        return torch.compile(fn)
    codegen_indexed.ROW_WALK_MIN = 4096 if mode == "rows" else 1 << 62
    return tpg.compile(fn)


def _top_kernel(step):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                     key=lambda e: -e.device_time)
    return [(e.name[:50], round(e.device_time / 1e3, 4)) for e in kernels[:3]]


def main():
    cli = argparse.ArgumentParser()
    cli.add_argument("--shapes", default=",".join(SHAPES))
    cli.add_argument("--device", default="cuda", help="cpu: a smoke run of 64 rows, no timing claims")
    args = cli.parse_args()
    device = args.device
    print(json.dumps(run_meta(device)), flush=True)
    for name in args.shapes.split(","):
        rows, classes = SHAPES[name] if device == "cuda" else (64, SHAPES[name][1])
        torch.manual_seed(0)
        target = torch.randint(0, classes, (rows,), device=device)
        if name.endswith("_head"):
            fn = head_loss
            bases = [torch.randn(rows, HIDDEN, device=device, dtype=torch.bfloat16),
                     torch.randn(classes, HIDDEN, device=device, dtype=torch.bfloat16) * 0.1]
        else:
            fn = loss
            bases = [torch.randn(rows, classes, device=device, dtype=torch.bfloat16) * 3]
        leaves = [b.clone().requires_grad_() for b in bases]
        fn(*leaves, target).backward()
        want = leaves[-1].grad.float()
        for mode in ("eager", "inductor", "rows", "flat"):
            call = compiled(mode, fn)
            leaves = [b.clone().requires_grad_() for b in bases]

            def step():
                for leaf in leaves:
                    leaf.grad = None
                call(*leaves, target).backward()
            step()
            err = float((leaves[-1].grad.float() - want).abs().max() / want.abs().max())
            ms = median_ms(step, 50, device)
            print(json.dumps({"shape": name, "mode": mode, "ms": round(ms, 4),
                              "top_kernels_ms": _top_kernel(step) if device == "cuda" else [],
                              "grad_rel_err": err}), flush=True)


if __name__ == "__main__":
    main()
