"""Eager linears whose output rows are not 16-byte aligned: computed through a padded weight.

A linear layer with an odd number of outputs (GPT-2's LM head: 50257) gives cuBLAS an output
leading dimension of 50257 bf16 elements, so it falls back to an alignment-1 kernel: 3.36 ms of
GPT-2's 4.8 ms call on the H200 (``benchmarks/profile_gpu.py``, benchmarks/RESULTS.md). Writing
into padded rows through ``out=`` did not help (measured: cuBLAS still saw the odd width). Here,
as Inductor's ``pad_mm`` does, the weight gets zero rows up to a multiple of 8 outputs (a copy
of the weight, made inside the call so in-place weight updates and CUDA-graph replays see the
current values), the product is computed with aligned rows and the first N columns are copied
out contiguous: eager's layout, values within bf16 GEMM rounding. Only large float16 / bfloat16
CUDA linears that no backend claimed change; ``TPG_PAD_LINEARS=0`` turns it off. Not yet timed
on the GPU (see RESULTS.md).

>>> rewrite_misaligned_linears(lowered_graph_module)      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..frameworks import adapter_for
from ..prims.lowering import Gemm

log = logging.getLogger("tensorplay_graph.compile")

ALIGN = 8            # elements: 16 bytes of float16 / bfloat16
MIN_ELEMENTS = 1 << 20  # below this the extra copy costs more than the slow kernel


def padded_linear(a: Any, weight: Any, bias: Any = None) -> Any:
    """``F.linear(a, weight, bias)`` through a weight padded to :data:`ALIGN` output rows."""
    F = adapter_for("torch").functional()
    n, k = weight.shape
    pad = (n + ALIGN - 1) // ALIGN * ALIGN - n
    padded = F.pad(weight, (0, 0, 0, pad))
    if bias is not None:
        bias = F.pad(bias, (0, pad))
    out = F.linear(a, padded, bias)
    return out[..., :n].contiguous()


def _misaligned_linear(node: Any) -> bool:
    prim = node.meta.get("prim")
    meta = node.meta.get("tensor_meta")
    rule = prim.lowering("tilelang") if prim is not None else None
    # linear's record: one GEMM whose weight is stored (N, K), with an optional bias epilogue
    if not (isinstance(rule, Gemm) and rule.rhs_transposed and (rule.lhs, rule.rhs) == ("a", "weight")
            and rule.epilogue_operands in ((), ("bias",))):
        return False
    if "kernel" in node.meta or not hasattr(meta, "shape"):
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
    if graph is None or os.environ.get("TPG_PAD_LINEARS", "1") in ("0", ""):
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
        log.info("linear(s) %s: weight padded to a multiple of %d outputs for cuBLAS's aligned "
                 "kernels", ", ".join(changed), ALIGN)
    return module
