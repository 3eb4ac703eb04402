"""Automatic CUDA graphs on the GPU: the output contract, and a small model's call cost.

    PYTHONPATH=$PWD python benchmarks/cuda_graphs_gpu.py [contract] [gpt2_small]

1. A pointwise program compiled with the defaults: graphs are used (``explain()`` says so); a
   result held by the caller is never overwritten by later calls; inputs are never written.
2. GPT-2 (2 layers, 256 wide, bf16, 4x128): eager vs ours with and without graphs (steady ms,
   first call s) and the compile log lines (one per TileLang compile over a second).
Prints one JSON line per check.
"""

from __future__ import annotations

import json
import sys
import logging
import time

import torch

import tensorplay_graph as tpg

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_modes import steady_ms  # noqa: E402


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def contract():
    def chain(x, y):
        return ((x * y).sin() + y).relu() * 2

    f = tpg.compile(chain)
    x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    keep_x = x.clone()
    for _ in range(3):
        torch.testing.assert_close(f(x, y), chain(x, y))
    held_x, held_y = torch.randn_like(x), torch.randn_like(y)
    held = f(held_x, held_y)
    want = chain(held_x, held_y)
    for _ in range(3):
        x2 = torch.randn_like(x)
        torch.testing.assert_close(f(x2, y), chain(x2, y))
    torch.testing.assert_close(held, want)  # never overwritten
    assert torch.equal(x, keep_x), "an input was written"
    runner = next(iter(f.specializations.values())).lowered
    return {"check": "contract", "ok": True, "explain": f.explain(),
            "state": getattr(runner, "state", None), "captures": getattr(runner, "captures", 0)}


def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=8192, n_positions=256,
                     attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 8192, (4, 128), device="cuda")
    rows = []
    with torch.no_grad():
        ref = model(ids).logits.float()
        rows.append({"mode": "eager", "ms": steady_ms(model, (ids,))})
        for mode, options in (("ours", None), ("ours_nographs", {"cuda_graphs": False}),
                              ("ours_dynamo", None)):
            handler = Lines()
            logging.getLogger("tensorplay_graph").addHandler(handler)
            logging.getLogger("tensorplay_graph.compile").setLevel(logging.INFO)
            torch._dynamo.reset()
            fn = (torch.compile(model, backend="tensorplay_graph") if mode == "ours_dynamo"
                  else tpg.compile(model, options=options))
            start = time.perf_counter()
            out = fn(ids).logits.float()
            torch.cuda.synchronize()
            row = {"mode": mode, "first_call_s": round(time.perf_counter() - start, 2),
                   "max_rel_err": float((out - ref).abs().max() / ref.abs().max()),
                   "ms": steady_ms(fn, (ids,)), "ms_holding_result": steady_ms(fn, (ids,), hold=True)}
            if hasattr(fn, "explain"):
                row["explain"] = fn.explain()
            row["compile_lines"] = [m for m in handler.lines if "compiled" in m or "cuda graphs" in m][:40]
            logging.getLogger("tensorplay_graph").removeHandler(handler)
            rows.append(row)
    return {"check": "gpt2_small", "rows": rows}


def main():
    import sys
    chosen = sys.argv[1:] or ["contract", "gpt2_small"]
    for check in [c for c in (contract, gpt2_small) if c.__name__ in chosen]:
        try:
            print(json.dumps(check()), flush=True)
        except Exception as exc:  # a row, not the end of the run
            import traceback
            print(json.dumps({"check": check.__name__, "ok": False, "error": repr(exc)[:500],
                              "where": traceback.format_exc().splitlines()[-8:]}), flush=True)


if __name__ == "__main__":
    main()
