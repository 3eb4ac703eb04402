"""Training steps on the GPU: forward + loss + backward, every entry point, same process.

    source benchmarks/gpu_setup.sh && python benchmarks/training_gpu.py --out $OUT

GPT-2 (6 layers, 768, 8x512) and Llama (4 layers, 2048, 4x512) from transformers configs with
random weights, bf16, dropout off; the step is ``model(ids, labels=ids).loss.backward()``.
Modes: ``eager``, ``inductor`` (torch.compile), ``ours_dynamo`` (torch.compile(backend=
"tensorplay_graph"): AOTAutograd's joint graph), ``ours`` (tensorplay_graph.compile: our own
joint graph from the prims' VJP rules; forward and backward replayed through CUDA graphs when
safe), ``ours_nographs`` (the same with ``options={"cuda_graphs": False}``). Each row: the loss and the worst parameter gradient
against eager (relative to that gradient's largest magnitude), first step seconds, steady ms
(median of CUDA-event timings) and one step's memory: peak allocated, allocated after the
forward, and peak reserved (CUDA graph pools hold their intermediates as reserved memory).
Rows print as JSON lines and go to <out>/training_gpu.json after every row (the loop over modes:
``bench_modes.py``, shared with ``models_gpu.py``).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_modes import (median_ms, parser, ratios, run_meta, run_modes, timed_call,  # noqa: E402
                         use_cache_root, write_rows)

use_cache_root("tpg_training_")

import torch  # noqa: E402

from models_gpu import gpt2, llama  # noqa: E402

MODELS = {"gpt2": gpt2, "llama": llama}
DEVICE = "cuda"


def _tiny(name):
    """``--smoke``: the same code path on the CPU with a one-layer model (no timing claims)."""
    import transformers
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=1, n_embd=64, n_head=2, vocab_size=500,
                                      n_positions=64)
        return transformers.GPT2LMHeadModel(cfg), (torch.randint(0, 500, (2, 16)),)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=4, vocab_size=500)
    return transformers.LlamaForCausalLM(cfg), (torch.randint(0, 500, (2, 16)),)


#: worst relative gradient error accepted for a bf16 model (eager vs compiled)
TOLERANCE = 5e-2


def entry_points(model):
    import tensorplay_graph as tpg
    return {
        "eager": lambda: model,
        "inductor": lambda: torch.compile(model),
        "ours": lambda: tpg.compile(model),
        "ours_nographs": lambda: tpg.compile(model, options={"cuda_graphs": False}),
        "ours_dynamo": lambda: torch.compile(model, backend="tensorplay_graph"),
    }


def step(fn, model, ids):
    model.zero_grad(set_to_none=True)
    loss = fn(ids, labels=ids).loss
    loss.backward()
    return loss


def grads(model):
    return {n: p.grad.detach().float().clone() for n, p in model.named_parameters()
            if p.grad is not None}


def memory_gb(fn, model, ids):
    """One step's peak allocated bytes, the bytes allocated right after its forward (what the
    backward keeps alive), and the peak the process reserved (a CUDA graph's private pool holds
    its intermediates as reserved, not allocated, memory), in GB."""
    if DEVICE == "cpu":
        return {"peak_gb": 0.0}
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # reserved: this mode's own, not the cache left by earlier modes
    torch.cuda.reset_peak_memory_stats()
    loss = fn(ids, labels=ids).loss
    torch.cuda.synchronize()
    after_forward = torch.cuda.memory_allocated()
    loss.backward()
    torch.cuda.synchronize()
    return {"peak_gb": round(torch.cuda.max_memory_allocated() / 2**30, 3),
            "after_forward_gb": round(after_forward / 2**30, 3),
            "peak_reserved_gb": round(torch.cuda.max_memory_reserved() / 2**30, 3)}


def run_model(name, modes, results, out_dir, meta):
    torch.manual_seed(0)
    model, args = MODELS[name]() if DEVICE == "cuda" else _tiny(name)
    model = model.to(DEVICE, torch.bfloat16).eval()  # eval: dropout off; grads still flow
    ids = args[0].to(DEVICE)
    ref_loss = float(step(model, model, ids))
    ref = grads(model)

    def measure(fn, row):
        loss, row["first_step_s"] = timed_call(lambda: float(step(fn, model, ids)), DEVICE)
        got = grads(model)
        row["loss_err"] = abs(loss - ref_loss) / max(abs(ref_loss), 1e-6)
        row["grad_rel_err"] = max(
            float((got[n] - g).abs().max() / max(g.abs().max().item(), 1e-12))
            if n in got else float("inf") for n, g in ref.items())
        row["ok"] = bool(row["grad_rel_err"] <= TOLERANCE and row["loss_err"] <= 1e-2)
        row["ms"] = round(median_ms(lambda: step(fn, model, ids), reps=20, device=DEVICE), 3)
        row.update(memory_gb(fn, model, ids))
        explain = getattr(fn, "explain", None)
        if explain is not None:
            lines = [line.strip() for line in explain().splitlines()]
            # the per-half summary lines: region counts and the CUDA-graph decision / failure
            row["plan"] = [line[:600] for line in lines
                           if "fused region" in line or line.startswith("cuda graphs")
                           or line.startswith(("saved for backward", "largest saved"))]

    def after_row(row):
        _ratios(results, name)
        write_rows(out_dir, "training_gpu.json", meta, results)

    run_modes(name, entry_points(model), modes, measure, results,
              error_chars=600, trace_lines=7, after_row=after_row)
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def _ratios(results, name):
    base = ratios(results, name, {"inductor": "speed_vs_inductor", "eager": "speed_vs_eager"})
    if "inductor" not in base:
        return
    for r in results:
        if r["model"] == name and "ms" in r:
            for key in ("peak_gb", "peak_reserved_gb"):
                if key in r and key in base["inductor"]:
                    r[key.replace("_gb", "_vs_inductor")] = round(
                        r[key] / max(base["inductor"][key], 1e-9), 3)


def main():
    cli = parser(MODELS, "eager,inductor,ours;ours_dynamo",
                 "phases separated by ';': every model runs a phase before the next")
    cli.add_argument("--smoke", action="store_true", help="tiny models on the CPU")
    args = cli.parse_args()
    global DEVICE
    DEVICE = "cpu" if args.smoke else "cuda"
    os.makedirs(args.out, exist_ok=True)
    meta = run_meta(DEVICE)
    print(json.dumps(meta), flush=True)
    results = []
    for phase in args.modes.split(";"):
        for name in args.models.split(","):
            run_model(name, set(phase.split(",")), results, args.out, meta)


if __name__ == "__main__":
    main()
