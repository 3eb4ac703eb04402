"""Kept results on the GPU: a loop that keeps each call's result (``out = model(x)``) gets
eager's values on every call and never sees a kept result change.

    source benchmarks/gpu_setup.sh && python benchmarks/kept_results_gpu.py [--models gpt2,llama]

Each model (``models_gpu.load``: bf16, eval, no_grad) is compiled with
``tensorplay_graph.compile`` (CUDA graphs when safe) and called ``--calls`` times on new
token ids of the same shape, in three patterns: ``drop`` (nothing kept), ``last`` (the last
result alive during the next call: the second graph alternates with the first) and ``all``
(every result kept: the copies). Per call the first output is compared with eager's (relative
to eager's largest magnitude), and every kept result with its value when returned (bitwise).
Rows print as JSON lines: the worst error, kept results that changed, and ``explain()``'s
CUDA-graph line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from models_gpu import MODELS, TOLERANCE, load  # noqa: E402


def first(value):
    value = getattr(value, "logits", value)
    return value[0] if isinstance(value, (tuple, list)) else value


def run(name: str, pattern: str, calls: int) -> dict:
    import tensorplay_graph as tpg
    model, args = load(name)
    compiled = tpg.compile(model)
    vocab, worst, changed, kept = model.config.vocab_size, 0.0, 0, []
    with torch.no_grad():
        for call in range(calls):
            ids = torch.randint(0, vocab, args[0].shape, device="cuda")
            if pattern == "last":
                kept = kept[-1:]  # the previous result, alive during this call
            out = compiled(ids)
            want = first(model(ids)).float()
            got = first(out).float()
            worst = max(worst, float((got - want).abs().max() / want.abs().max()))
            if pattern != "drop":
                changed += sum(not torch.equal(first(k), v) for k, v in kept)
                kept.append((out, first(out).clone()))
            del out
        graphs = [line.strip() for line in compiled.explain().splitlines()
                  if "cuda graphs" in line][:1]
    return {"model": name, "pattern": pattern, "calls": calls, "max_rel_err": worst,
            "kept_changed": changed, "ok": worst <= TOLERANCE and changed == 0,
            "cuda_graphs": graphs[0][:200] if graphs else None,
            "specializations": len(compiled.specializations)}


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--models", default="gpt2,llama")
    cli.add_argument("--calls", type=int, default=8)
    ns = cli.parse_args()
    rows = []
    for name in ns.models.split(","):
        if name not in MODELS:
            cli.error(f"unknown model {name!r}; choose from {sorted(MODELS)}")
        for pattern in ("drop", "last", "all"):
            rows.append(run(name, pattern, ns.calls))
            print(json.dumps(rows[-1]), flush=True)
            torch.cuda.empty_cache()
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
