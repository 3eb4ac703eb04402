"""Eager linears whose output rows are not 16-byte aligned: computed with padded rows.

A linear layer with an odd number of outputs (GPT-2's LM head: 50257) gives cuBLAS an output
leading dimension of 50257 bf16 elements, so it falls back to an alignment-1 kernel: 3.4 ms for
GPT-2's 4096 x 50257 x 768 on the H200, 70 % of the whole model (benchmarks/RESULTS.md). Here the
product is written into rows padded to a multiple of 8 elements (the kernel cuBLAS picks then is
the aligned one), then copied out contiguous, so the result has eager's layout and values within
bf16 GEMM rounding. Only large float16 / bfloat16 CUDA linears that no backend claimed change.

>>> rewrite_misaligned_linears(lowered_graph_module)      # doctest: +SKIP
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("tensorplay_graph.compile")

ALIGN = 8            # elements: 16 bytes of float16 / bfloat16
MIN_ELEMENTS = 1 << 20  # below this the extra copy costs more than the slow kernel


def padded_linear(a: Any, weight: Any, bias: Any = None) -> Any:
    """``F.linear(a, weight, bias)`` computed into rows padded to :data:`ALIGN` elements."""
    import torch
    n, k = weight.shape
    a2 = a.reshape(-1, k)
    padded = torch.empty(a2.shape[0], (n + ALIGN - 1) // ALIGN * ALIGN, dtype=a.dtype,
                         device=a.device)
    out = padded[:, :n]
    if bias is None:
        torch.mm(a2, weight.t(), out=out)
    else:
        torch.addmm(bias, a2, weight.t(), out=out)
    return out.contiguous().view(*a.shape[:-1], n)


def _misaligned_linear(node: Any) -> bool:
    prim = node.meta.get("prim")
    meta = node.meta.get("tensor_meta")
    if prim is None or prim.name != "linear" or "kernel" in node.meta or not hasattr(meta, "shape"):
        return False
    args = node.meta.get("prim_args") or {}
    weight = args.get("weight")
    wmeta = getattr(weight, "meta", {}).get("tensor_meta")
    return (meta.device_type == "cuda" and meta.dtype in ("float16", "bfloat16")
            and hasattr(wmeta, "shape") and len(wmeta.shape) == 2 and wmeta.dtype == meta.dtype
            and meta.shape[-1] % ALIGN != 0 and meta.numel >= MIN_ELEMENTS
            and len(meta.shape) >= 1 and all(hasattr(args.get(key), "meta") or args.get(key) is None
                                               for key in ("a", "bias")))


def rewrite_misaligned_linears(module: Any) -> Any:
    """Point every unclaimed misaligned linear of ``module``'s graph at :func:`padded_linear`."""
    graph = getattr(module, "graph", None)
    if graph is None:
        return module
    changed = []
    for node in graph.nodes:
        if node.op == "call_function" and _misaligned_linear(node):
            args = node.meta["prim_args"]
            node.target = padded_linear
            node.args = (args["a"], args["weight"], args.get("bias"))
            node.kwargs = {}
            changed.append(node.name)
    if changed:
        module.recompile()
        log.info("linear(s) %s: output rows padded to %d elements for cuBLAS's aligned kernels",
                 ", ".join(changed), ALIGN)
    return module
