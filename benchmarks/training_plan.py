"""What predicts the GPU training figures, measured on the CPU: saved bytes, kernels, eager nodes.

    PYTHONPATH=. python benchmarks/training_plan.py [--models gpt2,llama] [--tokens 1x128]

For GPT-2 (6 layers, 768) and Llama (4 layers, 2048) -- ``benchmarks/models_gpu.py``'s configs,
random weights, bf16, eval -- on a CPU batch of ``--tokens`` (batch x sequence), one training
step ``model(ids, labels=ids).loss``:

* **saved bytes**: the bytes autograd keeps between forward and backward (every tensor packed by
  ``torch.autograd.graph.saved_tensors_hooks`` during the forward, counted once per storage,
  parameters and inputs left out) for eager, for AOTAutograd with Inductor's decompositions
  and ``min_cut_rematerialization_partition`` (what Inductor saves), and for our joint graph
  (``tensorplay_graph.compile``: our min-cut's values plus what opaque ops' tapes hold). Saved
  activations grow linearly with tokens: ``x{factor} at 8x512`` scales them to the GPU batch.
* **plan**: our forward and backward graphs planned for the GPU backends (Triton, TileLang,
  as ``tensorplay_graph.explain`` plans on a CPU machine): fused regions (one kernel each),
  eager nodes that launch work (barriers and unclaimed nodes; views and tuple elements left
  out) by op and reason code, and the bytes every kernel / eager node reads plus writes.

One JSON line per model; ``--out DIR`` also writes ``training_plan.json`` there.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

log = logging.getLogger("training_plan")
GPU_TOKENS = {"gpt2": 8 * 512, "llama": 4 * 512}
GPU_BACKENDS = ["triton", "tilelang"]


def build(name, tokens, layers=None):
    """``(model, ids)``: the GPU benchmark's config (optionally fewer layers), bf16, eval."""
    from models_gpu import gpt2, llama
    torch.manual_seed(0)
    if layers is None:
        model, _ = {"gpt2": gpt2, "llama": llama}[name]()
    else:
        model = _with_layers(name, layers)
    batch, seq = tokens
    ids = torch.randint(0, model.config.vocab_size, (batch, seq))
    return model.to(torch.bfloat16).eval(), ids


def _with_layers(name, layers):
    import transformers
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, vocab_size=50257,
                                      n_positions=1024, attn_pdrop=0.0, embd_pdrop=0.0,
                                      resid_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632,
                                   num_hidden_layers=layers, num_attention_heads=16,
                                   num_key_value_heads=16, vocab_size=32000)
    return transformers.LlamaForCausalLM(cfg)


def saved_bytes(model, ids, fn):
    """Bytes autograd saves between ``fn``'s forward and its backward (once per storage;
    parameters and ``ids`` left out), and the loss; after one warm-up step (a compiler's
    first call captures and may run the program eagerly)."""
    fn(ids, labels=ids).loss.backward()
    model.zero_grad(set_to_none=True)
    storages = {}
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip.add(ids.untyped_storage().data_ptr())

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in skip and storage.nbytes():
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(storages.values()), loss.detach()


def aot_inductor_like(model):
    """``torch.compile`` with AOTAutograd, Inductor's decompositions and min-cut partitioner;
    both halves run as aten graphs (no Inductor codegen: only the partition matters here)."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table
    info = {"saved": [], "forward_nodes": 0, "backward_nodes": 0}

    def partition(joint, inputs, **kwargs):
        fw, bw = min_cut_rematerialization_partition(joint, inputs, compiler="inductor", **kwargs)
        outs = list(fw.graph.find_nodes(op="output"))[0].args[0]
        for node in outs[kwargs["num_fwd_outputs"]:]:
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                info["saved"].append((node.name, val.numel() * val.element_size()))
        info["forward_nodes"] += len(fw.graph.nodes)
        info["backward_nodes"] += len(bw.graph.nodes)
        return fw, bw

    backend = aot_autograd(fw_compiler=lambda gm, _: make_boxed_func(gm),
                           bw_compiler=lambda gm, _: make_boxed_func(gm),
                           decompositions=select_decomp_table(), partition_fn=partition)
    return torch.compile(model, backend=backend), info


def _bytes(meta):
    from tensorplay_graph.ir.meta import TensorMeta
    if isinstance(meta, TensorMeta):
        return meta.nbytes
    if isinstance(meta, (tuple, list)):
        return sum(_bytes(m) for m in meta)
    return 0


def _target_name(node):
    target = node.target
    return str(getattr(target, "__name__", target))


def _no_launch(node):
    """Reading an element of a tuple result or an opaque op's tape launches nothing."""
    import operator
    from tensorplay_graph.training.opaque import tape_value
    if node.target is tape_value:
        return True
    base = node.args[0] if node.args else None
    return node.target is operator.getitem and isinstance(
        getattr(base, "meta", {}).get("tensor_meta"), tuple)


def plan(gm, inputs):
    """Our plan of one graph for the GPU backends: counts, reasons, traffic."""
    import tensorplay_graph as tpg
    report = tpg.explain(gm, *inputs, backend=GPU_BACKENDS, assume_device="cuda",
                         compile_kernels=False)
    nodes = {n.name: n for n in report.graph_module.graph.nodes}
    meta = {name: n.meta.get("tensor_meta") for name, n in nodes.items()}
    traffic = 0
    for region in report.regions:
        traffic += sum(_bytes(meta[n]) for n in region.inputs + region.outputs)
    reasons = collections.Counter()
    for name in list(report.barriers) + report.eager:
        node = nodes[name]
        prim = node.meta.get("prim")
        if (prim is not None and prim.kind == "view") or _no_launch(node):
            continue  # a view or a tuple element launches nothing and moves nothing
        why = report.barrier_codes.get(name) or "declined by " + ", ".join(
            sorted(report.declined.get(name, {}))) or "no backend"
        reasons[f"{prim.name if prim else _target_name(node)}: {why}"] += 1
        traffic += _bytes(meta[name]) + sum(_bytes(i.meta.get("tensor_meta"))
                                            for i in node.all_input_nodes)
    return {"regions": len(report.regions), "by_backend": dict(collections.Counter(
        r.backend for r in report.regions)), "eager_nodes": sum(reasons.values()),
        "eager_reasons": dict(reasons.most_common()), "traffic_mb": round(traffic / 2**20, 1)}


def ours(model, ids):
    """Our joint graph for the step: its split, saved values and the plan of both halves."""
    from tensorplay_graph.capture import capture
    from tensorplay_graph.training.joint import build_joint
    from tensorplay_graph.training.mincut import example_arguments, split_joint

    def step(ids):
        return model(ids, labels=ids).loss

    start = time.perf_counter()
    captured = capture(step, ids)
    joint = build_joint(captured, (ids,))
    split = split_joint(joint)
    build_s = time.perf_counter() - start
    primals, backward_args = example_arguments(captured, joint, split, (ids,))
    return {"opaque": sorted(collections.Counter(joint.opaque).items()),
            "mincut_saved_values": len(split.saved),
            "mincut_saved_mb": round(split.saved_bytes / 2**20, 2),
            "recomputed": len(split.recomputed), "joint_build_s": round(build_s, 2),
            "forward": plan(split.forward, primals),
            "backward": plan(split.backward, backward_args)}


def run(name, tokens, layers=None):
    import tensorplay_graph as tpg
    model, ids = build(name, tokens, layers)
    row = {"model": name, "tokens": "x".join(map(str, tokens)),
           "layers": layers or "full", "to_8x512": GPU_TOKENS[name] / (tokens[0] * tokens[1])}
    eager, loss = saved_bytes(model, ids, model)
    row["eager_saved_mb"] = round(eager / 2**20, 2)
    aot, info = aot_inductor_like(model)
    got, aot_loss = saved_bytes(model, ids, aot)
    row["aot_saved_mb"] = round(got / 2**20, 2)
    row["aot_partition_saved_mb"] = round(sum(b for _, b in info["saved"]) / 2**20, 2)
    row["aot_saved_values"] = len(info["saved"])
    row["aot_largest_saved"] = sorted(info["saved"], key=lambda s: -s[1])[:6]
    torch._dynamo.reset()
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    got, ours_loss = saved_bytes(model, ids, compiled)
    row["ours_saved_mb"] = round(got / 2**20, 2)
    row["loss_diff"] = abs(float(ours_loss) - float(loss))
    row.update(ours(model, ids))
    return row


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--tokens", default="1x128", help="batch x sequence on the CPU")
    parser.add_argument("--layers", type=int, default=None, help="fewer layers (faster)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    tokens = tuple(int(v) for v in args.tokens.split("x"))
    rows = []
    for name in args.models.split(","):
        rows.append(run(name, tokens, args.layers))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "training_plan.json"), "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
