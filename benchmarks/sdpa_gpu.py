"""Which kernels eager attention launches for GPT-2's shapes, and what a call costs each way.

    PYTHONPATH=$PWD python benchmarks/sdpa_gpu.py

GPT-2 at 8x512 (12 heads of 64, bf16): the query a strided view of the QKV product (as
transformers makes it), key / value contiguous. Prints the SDPA backend torch picks, the
kernels one call launches with the op that launched each, and Triton ``do_bench`` ms for:
the call as captured (``is_causal=True``, no mask), and the cuDNN op called directly.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from triton.testing import do_bench


def kernels(fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = []
    for event in prof.events():
        for kernel in getattr(event, "kernels", []) or []:
            chain, parent = [event.name], event.cpu_parent
            while parent is not None and len(chain) < 4:
                chain.append(parent.name)
                parent = parent.cpu_parent
            out.append(f"{kernel.name[:50]} <- {' < '.join(chain)}")
    return out


def captured_calls():
    """The attention calls of GPT-2 / Llama as ``tensorplay_graph.capture`` records them on CUDA."""
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import tensorplay_graph as tpg
    from models_gpu import MODELS
    for name in ("gpt2", "llama"):
        model, args = MODELS[name]()
        model = model.to("cuda", torch.bfloat16).eval()
        with torch.no_grad():
            gm = tpg.capture(model, *(a.to("cuda") for a in args))
        for node in gm.graph.nodes:
            if "scaled_dot_product" in str(node.target):
                meta = {k: str(getattr(v, "meta", {}).get("tensor_meta", v))[:160]
                        for k, v in node.kwargs.items()}
                print(json.dumps({"model": name, "node": node.name, "kwargs": meta,
                                  "args": [str(a.meta.get("tensor_meta"))[:160]
                                           for a in node.args if hasattr(a, "meta")]}))
                break


def main():
    captured_calls()
    b, s, h, d = 8, 512, 12, 64
    qkv = torch.randn(b, s, 3 * h * d, device="cuda", dtype=torch.bfloat16)
    q = qkv[..., :h * d].view(b, s, h, d).transpose(1, 2)
    k = qkv[..., h * d:2 * h * d].reshape(b, s, h, d).transpose(1, 2).contiguous()
    v = qkv[..., 2 * h * d:].reshape(b, s, h, d).transpose(1, 2).contiguous()
    choice = torch._fused_sdp_choice(q, k, v, None, 0.0, True, 0.125)
    print(json.dumps({"fused_sdp_choice": int(choice),
                      "backends": {int(x): str(x) for x in torch.nn.attention.SDPBackend}}))
    calls = {
        "as captured": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125),
        "q contiguous": lambda: F.scaled_dot_product_attention(q.contiguous(), k, v, is_causal=True,
                                                               scale=0.125),
        "cudnn op": lambda: torch.ops.aten._scaled_dot_product_cudnn_attention(
            q, k, v, None, False, 0.0, True, False, scale=0.125)[0],
        "flash op": lambda: torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, True, False, scale=0.125)[0],
    }
    ref = calls["as captured"]().float()
    for name, fn in calls.items():
        try:
            got = fn().float()
            row = {"call": name, "ms": round(do_bench(fn, warmup=25, rep=200), 4),
                   "max_diff_vs_captured": float((got - ref).abs().max()),
                   "kernels": kernels(fn)}
        except Exception as exc:  # noqa: BLE001 - a probe: report and go on
            row = {"call": name, "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
