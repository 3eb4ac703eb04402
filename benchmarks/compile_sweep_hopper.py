"""Compile every Triton kernel of the model zoo's GPU plans for Hopper (sm_90), on this CPU.

    TRITON_DEFAULT_FP_FUSION=1 PYTHONPATH=. python benchmarks/compile_sweep_hopper.py \
        [--cells zoo,gpu,train] [--out DIR]

No GPU and no ``TRITON_INTERPRET``: each program is planned for CUDA (``explain(...,
assume_device="cuda")``, backends triton + tilelang, GEMM policy "auto": cuBLAS + a Triton
epilogue) and every Triton kernel the plan launches is compiled with
``triton.compile(..., target=GPUTarget("cuda", 90, 32))`` (``backends/triton/compile_sweep.py``).
Cells:

* ``zoo``: every model of ``tests/models/zoo.py``, inference, fp32 (and bf16 for torch models);
* ``gpu``: ``benchmarks/models_gpu.py``'s GPT-2 (768 wide, vocab 50257), Llama (2048 wide,
  vocab 32000) -- one layer each -- and ResNet-50 (transformers' bottleneck ResNet, batch 2,
  112 px), inference, bf16 and fp32, GPT-2 / Llama at 64 tokens and at an odd length (17:
  what a dynamic-shape call specializes to);
* ``train``: the training step ``model(ids, labels=ids).loss`` of those GPT-2 / Llama configs
  and of the zoo's GPT-2 / Llama, bf16 and fp32, forward and backward graphs of both training
  paths: ``tensorplay_graph.compile``'s own joint graph and ``torch.compile(backend=
  "tensorplay_graph")``'s AOTAutograd graphs.

One JSON line per cell (kernels compiled, failures, seconds); a summary line at the end;
``--out DIR`` writes ``compile_sweep_hopper.json`` with every failing kernel's source.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import torch  # noqa: E402

log = logging.getLogger("compile_sweep_hopper")


def gpu_gpt2(layers=1):
    import transformers
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257,
                                  n_positions=1024, attn_pdrop=0.0, embd_pdrop=0.0,
                                  resid_pdrop=0.0, use_cache=False)
    return transformers.GPT2LMHeadModel(cfg).eval(), 50257


def gpu_llama(layers=1):
    import transformers
    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632,
                                   num_hidden_layers=layers, num_attention_heads=16,
                                   num_key_value_heads=16, vocab_size=32000, use_cache=False)
    return transformers.LlamaForCausalLM(cfg).eval(), 32000


def resnet50():
    import transformers
    cfg = transformers.ResNetConfig(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048],
                                    depths=[3, 4, 6, 3], layer_type="bottleneck", num_labels=1000)
    return transformers.ResNetForImageClassification(cfg).eval()


def cells(which):
    """``(name, build)``; ``build() -> (kind, model, args, kwargs)``, kind "infer" / "train"."""
    from models.zoo import ZOO
    out = []
    if "zoo" in which:
        for spec in ZOO:
            dtypes = ("float32", "bfloat16") if spec.framework == "torch" else ("float32",)
            for dt in dtypes:
                out.append((f"zoo/{spec.name}/{dt}/infer", _zoo(spec, dt)))
    if "gpu" in which:
        for dt in ("bfloat16", "float32"):
            for name, make in (("gpt2", gpu_gpt2), ("llama", gpu_llama)):
                for length in (64, 17):
                    out.append((f"gpu/{name}/{dt}/infer/1x{length}", _lm(make, dt, length, "infer")))
            out.append((f"gpu/resnet50/{dt}/infer/2x112", _resnet(dt)))
    if "train" in which:
        for dt in ("bfloat16", "float32"):
            for name, make in (("gpt2", gpu_gpt2), ("llama", gpu_llama)):
                for path in ("train_ours", "train_aot"):
                    out.append((f"gpu/{name}/{dt}/{path}/1x64", _lm(make, dt, 64, path)))
            for name in ("gpt2", "llama"):
                for path in ("train_ours", "train_aot"):
                    out.append((f"zoo/{name}/{dt}/{path}", _zoo_lm(name, dt, path)))
    return out


def _zoo(spec, dt):
    def build():
        model, args, kwargs = spec.build()
        if dt != "float32":
            model = model.to(getattr(torch, dt))
            args = tuple(a.to(getattr(torch, dt)) if torch.is_tensor(a) and a.is_floating_point()
                         else a for a in args)
        return "infer", model, args, kwargs
    return build


def _lm(make, dt, length, kind):
    def build():
        torch.manual_seed(0)
        model, vocab = make()
        return kind, model.to(getattr(torch, dt)), (torch.randint(0, vocab, (1, length)),), {}
    return build


def _zoo_lm(name, dt, kind):
    def build():
        from models.zoo import BY_NAME
        model, args, _ = BY_NAME[name].build()
        return kind, model.to(getattr(torch, dt)), args, {}
    return build


def _resnet(dt):
    def build():
        torch.manual_seed(0)
        return ("infer", resnet50().to(getattr(torch, dt)),
                (torch.randn(2, 3, 112, 112, dtype=getattr(torch, dt)),), {})
    return build


def programs(kind, model, args, kwargs):
    """``[(label, fn_or_graph, inputs)]`` to plan for one cell."""
    from tensorplay_graph.backends.triton.compile_sweep import training_halves
    if kind == "infer":
        if kwargs:
            names = list(kwargs)
            return [("infer", lambda *a: model(*a[:len(args)],
                                               **dict(zip(names, a[len(args):]))),
                     list(args) + list(kwargs.values()))]
        return [("infer", model, list(args))]
    ids = args[0]
    if kind == "train_ours":
        return training_halves(lambda ids: model(ids, labels=ids).loss, ids)
    return aot_halves(model, ids)


def aot_halves(model, ids):
    """The graphs ``torch.compile(backend="tensorplay_graph")`` lowers for a training step."""
    import tensorplay_graph.compiler as compiler
    got, original = [], compiler.build_runner

    def record(gm, inputs, **kw):
        got.append((f"aot{len(got)}", gm, list(inputs)))
        return original(gm, inputs, **kw)

    torch._dynamo.reset()
    compiler.build_runner = record
    try:
        torch.compile(model, backend="tensorplay_graph")(ids, labels=ids).loss.backward()
    finally:
        compiler.build_runner = original
    return got


def run_cell(sweep, name, build):
    start = time.perf_counter()
    records, failures, regions = len(sweep.records), len(sweep.failures), sweep.regions
    lowering = len(sweep.lowering_errors)
    row = {"cell": name}
    try:
        kind, model, args, kwargs = build()
        for label, fn, inputs in programs(kind, model, args, kwargs):
            if kind == "infer":
                with torch.no_grad():
                    sweep.check(fn, *inputs, name=f"{name}/{label}")
            else:
                sweep.check(fn, *inputs, name=f"{name}/{label}")
    except Exception as exc:  # noqa: BLE001 - a planning failure is a row, not the end
        row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        row["where"] = traceback.format_exc().splitlines()[-6:-1]
    row.update(regions=sweep.regions - regions, new_kernels=len(sweep.records) - records,
               failures=len(sweep.failures) - failures,
               lowering_errors=len(sweep.lowering_errors) - lowering,
               seconds=round(time.perf_counter() - start, 1))
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", default="zoo,gpu,train")
    parser.add_argument("--only", default="", help="substring a cell name must contain")
    parser.add_argument("--out", default=None)
    parser.add_argument("--misaligned", action="store_true",
                        help="also launch every region with inputs off 16-byte alignment")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("unset TRITON_INTERPRET: the sweep runs Triton's real compiler")
    from tensorplay_graph.backends.triton.compile_sweep import HopperSweep
    sweep, rows, start = HopperSweep(misaligned=args.misaligned), [], time.perf_counter()
    for name, build in cells(args.cells.split(",")):
        if args.only in name:
            rows.append(run_cell(sweep, name, build))
            print(json.dumps(rows[-1]), flush=True)
    compile_s = sum(r.seconds for r in sweep.records)
    summary = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "cells": len(rows), "cell_errors": sum("error" in r for r in rows),
               "regions": sweep.regions, "launches": sweep.compiler.launches,
               "kernels_compiled": len(sweep.records), "failures": len(sweep.failures),
               "lowering_errors": len(sweep.lowering_errors),
               "misaligned": args.misaligned, "compile_s": round(compile_s, 1),
               "total_s": round(time.perf_counter() - start, 1),
               "torch": torch.__version__, "triton": __import__("triton").__version__}
    print(json.dumps(summary), flush=True)
    for record in sweep.failures:
        print(json.dumps({"failure": record.kernel, "where": record.where,
                          "error": record.error[:1500]}), flush=True)
    for error in sweep.lowering_errors:
        print(json.dumps({"lowering_error": error[:600]}), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "compile_sweep_hopper.json"), "w") as handle:
            json.dump({"summary": summary, "rows": rows,
                       "failures": [vars(r) for r in sweep.failures],
                       "lowering_errors": sweep.lowering_errors}, handle, indent=1)


if __name__ == "__main__":
    main()
