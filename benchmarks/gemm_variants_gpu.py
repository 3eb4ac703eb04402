"""The real models' GEMMs written different ways, timed on the GPU (exploration for issue 11).

    PYTHONPATH=$PWD python benchmarks/gemm_variants_gpu.py

Per shape (bf16, Triton's ``do_bench``, ms): GPT-2's MLP GEMM with its bias and tanh-GELU as
eager runs it (``addmm`` then the activation), with the activation in cuBLASLt's epilogue
(``torch._addmm_activation``), and the ``addmm`` alone (the floor); Llama's q / k / v and
gate / up projections as separate ``linear`` calls and as one call on the concatenated
weights. Also prints the largest error of each fused variant against a float32 reference, and
whether this torch has the allocator calls CUDA-graph pool checkpointing needs.
"""

from __future__ import annotations

import json
import math

import torch
import torch.nn.functional as F
from triton.testing import do_bench


def ms(fn):
    return round(do_bench(fn, warmup=50, rep=300), 4)


def gelu_mlp(m=4096, k=768, n=3072):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * 0.05
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16) * 0.1
    ref = F.gelu(torch.addmm(b.float(), x.float(), w.float()), approximate="tanh")
    eager = F.gelu(torch.addmm(b, x, w), approximate="tanh")
    fused = torch._addmm_activation(b, x, w, use_gelu=True)
    row = {"shape": f"gpt2 mlp {m}x{k}x{n} +bias gelu",
           "eager": ms(lambda: F.gelu(torch.addmm(b, x, w), approximate="tanh")),
           "addmm_activation": ms(lambda: torch._addmm_activation(b, x, w, use_gelu=True)),
           "addmm_alone": ms(lambda: torch.addmm(b, x, w)),
           "eager_err": float((eager.float() - ref).abs().max()),
           "fused_err": float((fused.float() - ref).abs().max())}
    print(json.dumps(row), flush=True)


def new_gelu(h):
    """transformers' NewGELUActivation, as GPT-2 runs it."""
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))


def specials():
    """Where eager's GPT-2 GELU and the cuBLASLt epilogue disagree on inf / NaN / huge
    pre-activations: a column of ``x`` holds the special value, ``w`` picks it out."""
    values = [float("inf"), float("-inf"), float("nan"), 1e30, -1e30, 3e4, -3e4, 0.0, -0.0]
    x = torch.zeros(16, 16, device="cuda", dtype=torch.bfloat16)
    x[:len(values), 0] = torch.tensor(values, dtype=torch.bfloat16)
    w = torch.zeros(16, 16, device="cuda", dtype=torch.bfloat16)
    w[0, :] = 1
    b = torch.zeros(16, device="cuda", dtype=torch.bfloat16)
    eager = new_gelu(torch.addmm(b, x, w))[:len(values), 0].float().tolist()
    fused = torch._addmm_activation(b, x, w, use_gelu=True)[:len(values), 0].float().tolist()
    big = torch.randn(4096, 768, device="cuda", dtype=torch.bfloat16)
    big[5, 3] = float("nan")
    big[7, 2] = float("-inf")
    wb = torch.randn(768, 3072, device="cuda", dtype=torch.bfloat16)
    bb = torch.zeros(3072, device="cuda", dtype=torch.bfloat16)
    e, f = new_gelu(torch.addmm(bb, big, wb)), torch._addmm_activation(bb, big, wb, use_gelu=True)
    print(json.dumps({"specials": values, "eager": eager, "fused": fused,
                      "big_nan_rows_equal": bool(torch.equal(e[5].isnan(), f[5].isnan())),
                      "big_inf_row_eager_nan": int(e[7].isnan().sum()),
                      "big_inf_row_fused_nan": int(f[7].isnan().sum()),
                      "big_inf_row_equal": bool(torch.equal(e[7], f[7]) or
                                                torch.equal(e[7].isnan(), f[7].isnan()))}),
          flush=True)


def merged(m, k, ns, name):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05 for n in ns]
    cat = torch.cat(ws)
    row = {"shape": f"{name} {m}x{k}x{'+'.join(map(str, ns))}",
           "separate": ms(lambda: [F.linear(x, w) for w in ws]),
           "merged": ms(lambda: F.linear(x, cat))}
    print(json.dumps(row), flush=True)


def main():
    names = ["_cuda_getCheckpointState", "_cuda_setCheckpointPoolState",
             "_construct_storage_from_data_pointer", "_cuda_beginAllocateCurrentThreadToPool",
             "_cuda_endAllocateToPool", "_cuda_releasePool", "_storage_Use_Count",
             "_set_storage_access_error_msg", "_cuda_checkPoolLiveAllocations"]
    print(json.dumps({"torch": torch.__version__,
                      "allocator_calls": {n: hasattr(torch._C, n) for n in names}}), flush=True)
    specials()
    gelu_mlp()
    gelu_mlp(8192, 8192, 8192)
    merged(2048, 2048, [2048, 2048, 2048], "llama qkv")
    merged(2048, 2048, [5632, 5632], "llama gate/up")
    merged(4096, 768, [768, 768, 768], "gpt2-size qkv")
    merged(2048, 2048, [32000], "llama lm head")


if __name__ == "__main__":
    main()
