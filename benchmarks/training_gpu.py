"""Training steps on the GPU: forward + loss + backward, every entry point, same process.

    source benchmarks/gpu_setup.sh && python benchmarks/training_gpu.py --out $OUT

GPT-2 (6 layers, 768, 8x512) and Llama (4 layers, 2048, 4x512) from transformers configs with
random weights, bf16, dropout off; the step is ``model(ids, labels=ids).loss.backward()``.
Modes: ``eager``, ``inductor`` (torch.compile), ``ours_dynamo`` (torch.compile(backend=
"tensorplay_graph"): AOTAutograd's joint graph), ``ours`` (tensorplay_graph.compile: our own
joint graph from the prims' VJP rules; forward and backward replayed through CUDA graphs when
safe), ``ours_nographs`` (the same with ``options={"cuda_graphs": False}``). Each row: the loss and the worst parameter gradient
against eager (relative to that gradient's largest magnitude), first step seconds, steady ms
(median of CUDA-event timings) and the peak ``torch.cuda.max_memory_allocated`` of one step.
Rows print as JSON lines and go to <out>/training_gpu.json after every row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

_TMP = tempfile.mkdtemp(prefix="tpg_training_")
for _var, _sub in (("TRITON_CACHE_DIR", "triton"), ("TPG_CACHE_DIR", "tpg"),
                   ("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TILELANG_CACHE_DIR", "tilelang")):
    os.environ.setdefault(_var, os.path.join(_TMP, _sub))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

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


def steady_ms(fn, model, ids, reps=20):
    for _ in range(3):
        step(fn, model, ids)
    if DEVICE == "cpu":
        start = time.perf_counter()
        step(fn, model, ids)
        return (time.perf_counter() - start) * 1e3
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(fn, model, ids)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def peak_bytes(fn, model, ids):
    if DEVICE == "cpu":
        return 0
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step(fn, model, ids)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def run_model(name, modes, results, out_dir, meta):
    torch.manual_seed(0)
    model, args = MODELS[name]() if DEVICE == "cuda" else _tiny(name)
    model = model.to(DEVICE, torch.bfloat16).eval()  # eval: dropout off; grads still flow
    ids = args[0].to(DEVICE)
    ref_loss = float(step(model, model, ids))
    ref = grads(model)
    for mode, make in entry_points(model).items():
        if mode not in modes:
            continue
        row = {"model": name, "mode": mode}
        try:
            torch._dynamo.reset()
            fn = make()
            _sync()
            start = time.perf_counter()
            loss = float(step(fn, model, ids))
            _sync()
            row["first_step_s"] = round(time.perf_counter() - start, 2)
            got = grads(model)
            row["loss_err"] = abs(loss - ref_loss) / max(abs(ref_loss), 1e-6)
            row["grad_rel_err"] = max(
                float((got[n] - g).abs().max() / max(g.abs().max().item(), 1e-12))
                if n in got else float("inf") for n, g in ref.items())
            row["ok"] = bool(row["grad_rel_err"] <= TOLERANCE and row["loss_err"] <= 1e-2)
            row["ms"] = round(steady_ms(fn, model, ids), 3)
            row["peak_gb"] = round(peak_bytes(fn, model, ids) / 2**30, 3)
            explain = getattr(fn, "explain", None)
            if explain is not None:
                row["explain"] = "\n".join(
                    line for line in explain().splitlines()  # no region / barrier lists
                    if "barrier" not in line and not line.strip().startswith("["))[:3000]
        except Exception as exc:  # a row, not the end of the run
            row["ok"] = False
            row["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
            row["where"] = traceback.format_exc().splitlines()[-8:-1]
        results.append(row)
        print(json.dumps(row), flush=True)
        _ratios(results, name)
        with open(os.path.join(out_dir, "training_gpu.json"), "w") as handle:
            json.dump({"meta": meta, "rows": results}, handle, indent=1)
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _ratios(results, name):
    base = {r["mode"]: r for r in results if r["model"] == name and "ms" in r}
    for r in results:
        if r["model"] == name and "ms" in r and "inductor" in base:
            r["speed_vs_inductor"] = round(base["inductor"]["ms"] / r["ms"], 3)
            r["peak_vs_inductor"] = round(r["peak_gb"] / max(base["inductor"]["peak_gb"], 1e-9), 3)
        if r["model"] == name and "ms" in r and "eager" in base:
            r["speed_vs_eager"] = round(base["eager"]["ms"] / r["ms"], 3)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default="eager,inductor,ours;ours_dynamo",
                        help="phases separated by ';': every model runs a phase before the next")
    parser.add_argument("--smoke", action="store_true", help="tiny models on the CPU")
    args = parser.parse_args()
    global DEVICE
    DEVICE = "cpu" if args.smoke else "cuda"
    os.makedirs(args.out, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d"),
            "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu",
            "torch": torch.__version__}
    print(json.dumps(meta), flush=True)
    results = []
    for phase in args.modes.split(";"):
        for name in args.models.split(","):
            run_model(name, set(phase.split(",")), results, args.out, meta)


if __name__ == "__main__":
    main()
