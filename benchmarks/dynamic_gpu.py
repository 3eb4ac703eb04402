"""Automatic dynamic shapes on the GPU: one model called with 10 sequence lengths.

    PYTHONPATH=$PWD python benchmarks/dynamic_gpu.py

GPT-2 (2 layers, 256 wide, bf16, eval) through ``torch.compile(backend="tensorplay_graph")``
and ``tensorplay_graph.compile``: every length's logits against eager, and how many times the
program was compiled (Dynamo graphs given to our backend; our own captures). Prints one JSON
line per entry point.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph import compiler  # noqa: E402,F401  (the module, for counting)

LENGTHS = [17, 33, 48, 64, 80, 97, 128, 150, 200, 256]


def model():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=256, n_head=4, attn_pdrop=0.0, embd_pdrop=0.0,
                     resid_pdrop=0.0, use_cache=False)
    return GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()


def main():
    import importlib
    module = importlib.import_module("tensorplay_graph.compiler")
    graphs = []
    backend = module.torch_backend

    def counting(gm, inputs, **kw):
        graphs.append(gm)
        return backend(gm, inputs, **kw)

    module.torch_backend = counting
    net = model()
    entries = {"torch.compile": lambda: torch.compile(net, backend=counting),
               "tensorplay_graph.compile": lambda: tpg.compile(net)}
    for name, make in entries.items():
        torch._dynamo.reset()
        graphs.clear()
        fn = make()
        worst = 0.0
        with torch.no_grad():
            for n in LENGTHS:
                ids = torch.randint(0, 50257, (2, n), device="cuda")
                want, got = net(ids).logits.float(), fn(ids).logits.float()
                worst = max(worst, float((got - want).abs().max() / want.abs().max()))
        row = {"entry": name, "lengths": len(LENGTHS), "dynamo_graphs": len(graphs),
               "our_captures": getattr(fn, "captures", 0),
               "frontend": getattr(fn, "frontend", "dynamo"), "max_rel_err": worst,
               "ok": worst <= 5e-2}
        row["compiles"] = row["dynamo_graphs"] + row["our_captures"]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
