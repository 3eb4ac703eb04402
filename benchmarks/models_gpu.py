"""Real models on the GPU: correctness and speed of every entry point against eager and Inductor.

    PYTHONPATH=$PWD python benchmarks/models_gpu.py --out $OUT [--models gpt2,llama] [--modes ...]

Models (transformers 4.57 built from configs with random weights, bf16, eval, no_grad):
GPT-2 (6 layers, 768 wide, batch 8x512), Llama (4 layers, 2048 hidden, 4x512), BERT (6 layers,
16x256), and ResNet-50 (torchvision, bf16, batch 64, 224x224). Modes, all in the same process:
``eager``, ``inductor`` (torch.compile default; also ``inductor_max_autotune_nocg`` and
``inductor_reduce_overhead``), ``ours_dynamo`` (torch.compile(backend="tensorplay_graph")),
``ours`` (tensorplay_graph.compile; CUDA graphs when safe), ``ours_nographs`` (the same with
``options={"cuda_graphs": False}``), ``ours_unmerged`` (planned with ``TPG_MERGE_LINEARS=0``) and ``ours_gemm_tilelang`` / ``ours_gemm_measure``
(``options={"gemm": ...}``: every GEMM as a TileLang kernel / each GEMM's kernel raced on the
device; ``ours`` takes cuBLAS unless a measurement is cached; rows list the choices). ``ms_holding_result``: steady ms while the caller keeps the
previous result (``out = model(x)`` in a loop). Each row: ok / error, the max error
against eager relative to eager's largest magnitude, first-call seconds and steady ms (median of
CUDA-event timings). Rows print as JSON lines and go to <out>/models_gpu.json. The loop over
modes, the timing and the ratios are ``bench_modes.py``, shared with ``training_gpu.py``.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_modes import (parser, ratios, run_meta, run_modes, steady_ms, timed_call,  # noqa: E402
                         use_cache_root, write_rows)

#: TPG_BENCH_CACHE: one cache root for every compiler, so a second process starts warm
use_cache_root("tpg_models_", os.environ.get("TPG_BENCH_CACHE"))

import torch  # noqa: E402

BF = torch.bfloat16
#: relative max error (|ours - eager| / max|eager|) accepted for bf16 whole-model outputs
TOLERANCE = 5e-2


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024,
                     attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0)
    return GPT2LMHeadModel(cfg), (torch.randint(0, 50257, (8, 512)),)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000)
    return LlamaForCausalLM(cfg), (torch.randint(0, 32000, (4, 512)),)


def bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(num_hidden_layers=6, hidden_size=768, num_attention_heads=12,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertModel(cfg), (torch.randint(0, 30522, (16, 256)),)


def resnet50():
    import torchvision
    return torchvision.models.resnet50(), (torch.randn(64, 3, 224, 224),)


MODELS = {"gpt2": gpt2, "llama": llama, "bert": bert, "resnet50": resnet50}


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    return first_tensor(out[0])


class FirstCallEnv:
    """``fn`` whose first call (where ours plans and compiles) runs with ``env`` set."""

    def __init__(self, fn, **env):
        self.fn, self.env = fn, env

    def __call__(self, *args):
        if self.env is None:
            return self.fn(*args)
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            return self.fn(*args)
        finally:
            self.env = None
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def entry_points(model):
    import tensorplay_graph as tpg
    return {
        "eager": lambda: model,
        "inductor": lambda: torch.compile(model),
        "ours": lambda: tpg.compile(model),  # first of ours: its first call is the cold one
        "ours_nographs": lambda: tpg.compile(model, options={"cuda_graphs": False}),
        # GEMM choice (backends/gemm_choice.py): "ours" is the default ("auto": cuBLAS + Triton
        # epilogue unless a cached measurement says TileLang); these force the other policies
        "ours_gemm_tilelang": lambda: tpg.compile(model, options={"gemm": "tilelang"}),
        "ours_gemm_measure": lambda: tpg.compile(model, options={"gemm": "measure"}),
        # planning switches read from the environment while the first call plans
        "ours_unmerged": lambda: FirstCallEnv(tpg.compile(model), TPG_MERGE_LINEARS="0"),
        "ours_dynamo": lambda: torch.compile(model, backend="tensorplay_graph"),
        "inductor_max_autotune_nocg": lambda: torch.compile(model, mode="max-autotune-no-cudagraphs"),
        "inductor_reduce_overhead": lambda: torch.compile(model, mode="reduce-overhead"),
    }


def load(name):
    """``(model, args)`` of ``MODELS[name]`` on CUDA in bf16, eval, seeded: what every GPU
    benchmark of these models runs."""
    torch.manual_seed(0)
    model, args = MODELS[name]()
    model = model.to("cuda", BF).eval()
    return model, tuple(a.to("cuda", BF) if a.is_floating_point() else a.to("cuda") for a in args)


def run_model(name, modes, results):
    model, args = load(name)

    def measure(fn, row):
        out, row["first_call_s"] = timed_call(
            lambda: first_tensor(_first_call(fn, args, f"{name}/{row['mode']}")).float())
        row["max_rel_err"] = float((out - ref).abs().max().item() / scale)
        row["ok"] = bool(out.shape == ref.shape and row["max_rel_err"] <= TOLERANCE)
        del out
        row["ms"] = round(steady_ms(fn, args), 3)
        if row["mode"].startswith("ours") or row["mode"] == "inductor_reduce_overhead":
            row["ms_holding_result"] = round(steady_ms(fn, args, hold=True), 3)
        if row["mode"].startswith("ours"):
            _describe(fn, args, row)

    with torch.no_grad():
        ref = first_tensor(model(*args)).float()
        scale = ref.abs().max().item()
        run_modes(name, entry_points(model), modes, measure, results)
    ratios(results, name, {"eager": "speedup_vs_eager", "inductor": "speedup_vs_inductor"})
    del model
    torch.cuda.empty_cache()


def _first_call(fn, args, label):
    """``fn(*args)``; with TPG_BENCH_PROFILE_FIRST=1, cProfile's top functions go to stderr."""
    if not os.environ.get("TPG_BENCH_PROFILE_FIRST"):
        return fn(*args)
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    out = prof.runcall(fn, *args)
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    sys.stderr.write(f"--- first call profile: {label}\n{text.getvalue()}")
    return out


def _describe(fn, args, row):
    explain = getattr(fn, "explain", None)  # tensorplay_graph.compile: frontend, specializations
    if explain is not None:
        text = explain()
        row["explain"] = text[:600]
        # per GEMM: "region 3: GEMM 4096x2048x2048 bfloat16 linear +0 epilogue op(s): cublas (...)"
        choices = [line.split(": ", 1)[1] for line in text.splitlines() if ": GEMM " in line]
        if choices:
            row["gemm_winners"] = {w: sum(f"): {w} (" in c for c in choices)
                                   for w in ("cublas", "tilelang")}
            row["gemm_choices"] = sorted(set(c.split(": ", 1)[1] for c in choices))[:12]


def main():
    args = parser(MODELS, "eager,inductor,ours_dynamo,ours").parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    meta = run_meta()
    try:
        import transformers
        meta["transformers"] = transformers.__version__
    except ImportError:
        pass
    print(json.dumps(meta), flush=True)
    for name in args.models.split(","):
        run_model(name, set(args.modes.split(",")), results)
        write_rows(args.out, "models_gpu.json", meta, results)


if __name__ == "__main__":
    main()
