"""Small linear layers reading the same input, merged into one GEMM (part of ``decompose``).

Llama's attention projects one normalized input three times: ``q_proj(x)``, ``k_proj(x)``,
``v_proj(x)``. Each 2048 x 2048 @ 2048 GEMM is about one wave of cuBLAS's tiles on the H200's
132 SMs, so each ends with a partly idle GPU; one GEMM over the concatenated weights keeps it
busy (``benchmarks/gemm_variants_gpu.py``, bf16: three ``linear`` 0.0800 ms, merged 0.0737;
GPT-2-sized 4096 x 768 @ 3 x 768: 0.0341 -> 0.0266). Larger GEMMs gain nothing: Llama's
gate / up (2 x 5632 outputs, almost three waves each) ran slower merged, 0.1365 -> 0.1455.
Hence the rule: merge linears whose GEMMs each fit one wave of 128 x 256 output tiles.

The rewrite takes two or more ``linear(x, W_i[, b_i])`` of one input ``x`` whose weights
(and biases, all or none) are the program's state (``get_attr``), of one dtype, on a CUDA
device; torch float16 / bfloat16 programs only (``TPG_MERGE_LINEARS=0`` turns it off). They
become ``linear(x, cat(W_i)[, cat(b_i)])`` and one slice of its last dim per layer. The
concatenation is a :class:`~tensorplay_graph.cached_weight.CachedWeight`: made once, made
again in the same buffer when a weight is written in place, before a CUDA-graph replay too.
Its cost is a second copy of the merged weights (Llama's 4 layers at 2048: 100 MB). Weights
that arrive as inputs (the training path's forward, Dynamo's lifted parameters) are left
alone: they may change every call, and a per-call concatenation costs more than it saves.

A slice is strided where eager's result was contiguous, so every reader of a layer's result,
through views, must be a prim or an attention call (both read any strides), none may write
into it and it must not be a program output (a caller would see the strides). Views between
are given the strides the slice makes them (their own meta rules; a view that cannot view
the slice keeps the layer apart). Values differ from eager's only as two cuBLAS kernels'
rounding may.
"""

from __future__ import annotations

import math
import operator
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..cached_weight import CachedWeight, same_kind
from ..frameworks import adapter_for
from ..ir.aliases import mutated_alias_nodes
from ..ir.meta import TensorMeta, contiguous_strides, tensor_meta_of
from ..ir.node import Node, map_arg
from ..prims import prim_name
from .causal_attention import is_attention

__all__ = ["merge_sibling_linears", "ConcatenatedWeights", "TILE"]

_DTYPES = frozenset({"float16", "bfloat16"})
#: cuBLAS's output tile on Hopper for these GEMMs (M x N), for the one-wave rule
TILE = (128, 256)
#: SMs of the GPU the rule was measured on (H200): a plan made without a GPU
#: (``explain(..., assume_device="cuda")`` on a CPU machine) assumes it
PLANNING_SMS = 132


class ConcatenatedWeights(CachedWeight):
    """Several weights (or biases) concatenated along dim 0 (:mod:`..cached_weight`: made
    once, refreshed in place when a parameter changes)."""

    eager_reason = ("the weights of linear layers reading one input, concatenated for one "
                    "GEMM: a cached copy, refreshed when a parameter changes (merge_linears)")

    def convert(self, *weights: Any) -> Any:
        return adapter_for(weights[0]).module.cat(weights)

    def refill(self, buffer: Any, *weights: Any) -> bool:
        rows = sum(w.shape[0] for w in weights)
        if tuple(buffer.shape) != (rows, *weights[0].shape[1:]) or \
                not all(same_kind(buffer, w) and w.shape[1:] == buffer.shape[1:] for w in weights):
            return False
        start = 0
        for w in weights:
            buffer[start:start + w.shape[0]].copy_(w)
            start += w.shape[0]
        return True


def _sm_count(device: str) -> int:
    torch = adapter_for("torch")
    if not device.startswith("cuda") or not torch.loaded() or not torch.cuda_available():
        return PLANNING_SMS
    return torch.module.cuda.get_device_properties(device).multi_processor_count


def _state(value: Any) -> bool:
    return isinstance(value, Node) and value.op == "get_attr" and tensor_meta_of(value) is not None


def _candidate(node: Node, x: Node, devices: Sequence[str]) -> bool:
    """``node`` is ``linear(x, W[, b])`` with state operands, in half precision on ``devices``."""
    if prim_name(node) != "linear" or node.op != "call_function":
        return False
    args = node.meta["prim_args"]
    weight, bias, out = args.get("weight"), args.get("bias"), tensor_meta_of(node)
    if args.get("a") is not x or not _state(weight) or (bias is not None and not _state(bias)):
        return False
    xm, wm = tensor_meta_of(x), tensor_meta_of(weight)
    return out is not None and xm is not None and wm.ndim == 2 and xm.ndim >= 1 and \
        wm.shape[1] == xm.shape[-1] and {xm.dtype, wm.dtype, out.dtype} == {out.dtype} and \
        out.dtype in _DTYPES and out.device_type in devices and \
        (bias is None or tensor_meta_of(bias).ndim == 1)


def _fits_one_wave(rows: int, outputs: int, sm_count: int) -> bool:
    return math.ceil(rows / TILE[0]) * math.ceil(outputs / TILE[1]) <= sm_count


def _reader_metas(layer: Node, meta: TensorMeta, framework: str,
                  written: set) -> Optional[Dict[Node, TensorMeta]]:
    """New metas of ``layer`` (now strided as ``meta``) and of the views reading it, or None
    when a reader cannot take a strided value (module docstring)."""
    from ..prims.rules import framework_rules
    metas, stack = {layer: meta}, [layer]
    while stack:
        node = stack.pop()
        if node in written:
            return None
        for user in node.users:
            prim = user.meta.get("prim")
            if prim is None:
                if is_attention(user):
                    continue
                return None  # an output, a custom op, a Python call
            if prim.kind != "view":
                continue
            args = map_arg(user.meta["prim_args"], lambda n: metas.get(n, n.meta.get("tensor_meta")))
            try:
                with framework_rules(framework):
                    new = prim.meta(**args)
            except Exception:  # ``view`` of a slice it cannot view
                return None
            old = tensor_meta_of(user)
            if not isinstance(new, TensorMeta) or old is None or new.shape != old.shape:
                return None
            metas[user] = new
            stack.append(user)
    return metas


def _slice_meta(out: TensorMeta, total: int) -> TensorMeta:
    """A layer's result as a slice of the merged one (``total`` outputs per row)."""
    return out.with_(stride=contiguous_strides(out.shape[:-1] + (total,)))


def _merge(x: Node, layers: List[Node], framework: str, written: set,
           order: Dict[Node, int]) -> bool:
    """``order``: graph positions from before any merge (the layers' and their weights' own
    order holds: only get_attr nodes move, and only earlier)."""
    from .decompose import annotate
    outs = [tensor_meta_of(n) for n in layers]
    starts = [0]
    for out in outs:
        starts.append(starts[-1] + out.shape[-1])
    total = starts[-1]
    plans = [_reader_metas(layer, _slice_meta(out, total), framework, written)
             for layer, out in zip(layers, outs)]
    if any(metas is None for metas in plans):
        return False
    graph = x.graph
    first = min(layers, key=order.__getitem__)
    weights = [n.meta["prim_args"]["weight"] for n in layers]
    biases = [n.meta["prim_args"].get("bias") for n in layers]
    for state in weights + [b for b in biases if b is not None]:
        if order[state] > order[first]:  # a get_attr reads nothing: it may move up
            first.prepend(state)
    made: List[Node] = []
    with graph.inserting_before(first):
        weight = graph.call_function(ConcatenatedWeights(), tuple(weights),
                                     name=f"{weights[0].name}_merged")
        wm = tensor_meta_of(weights[0])
        weight.meta["tensor_meta"] = wm.with_(shape=(total, wm.shape[1]),
                                              stride=contiguous_strides((total, wm.shape[1])))
        made.append(weight)
        bias = None
        if biases[0] is not None:
            bias = graph.call_function(ConcatenatedWeights(), tuple(biases),
                                       name=f"{biases[0].name}_merged")
            bias.meta["tensor_meta"] = tensor_meta_of(biases[0]).with_(shape=(total,), stride=(1,))
            made.append(bias)
        F = adapter_for("torch").functional()
        merged = graph.call_function(F.linear, (x, weight, bias))
        made.append(merged)
        pieces = []
        for out, lo in zip(outs, starts):
            index = (slice(None),) * (out.ndim - 1) + (slice(lo, lo + out.shape[-1]),)
            pieces.append(graph.call_function(operator.getitem, (merged, index)))
        made.extend(pieces)
    for node in made:
        node.meta["stack"] = first.meta.get("stack")
    if not annotate(merged, framework) or not all(annotate(p, framework) for p in pieces) or \
            any(p.meta["tensor_meta"].shape != o.shape for p, o in zip(pieces, outs)):
        for node in reversed(made):
            graph.erase_node(node)
        return False
    for layer, piece, metas in zip(layers, pieces, plans):
        layer.replace_all_uses_with(piece)
        for node, meta in metas.items():
            if node is not layer:
                node.meta["tensor_meta"] = meta
        graph.erase_node(layer)
    return True


def merge_sibling_linears(gm: Any, framework: str, devices: Sequence[str] = ("cuda",),
                          sm_count: Optional[int] = None) -> int:
    """Merge the linear layers the module docstring describes; returns how many merged GEMMs
    were made. ``devices`` / ``sm_count``: tests run the rewrite on the CPU with a stand-in
    SM count (on CUDA it is the device's)."""
    if framework != "torch" or os.environ.get("TPG_MERGE_LINEARS", "1") in ("0", ""):
        return 0
    graph = getattr(gm, "graph", gm)
    written: Optional[set] = None
    order: Dict[Node, int] = {}
    done = 0
    for x in list(graph.nodes):
        layers = [u for u in x.users if _candidate(u, x, devices)]
        if len(layers) < 2:
            continue
        out = tensor_meta_of(layers[0])
        sms = sm_count if sm_count is not None else _sm_count(out.device)
        rows = out.numel // max(out.shape[-1], 1) if out.shape else 1
        groups: Dict[Tuple[Any, ...], List[Node]] = {}
        for layer in layers:
            m, bias = tensor_meta_of(layer), layer.meta["prim_args"].get("bias")
            if _fits_one_wave(rows, m.shape[-1], sms):
                groups.setdefault((m.dtype, m.device, bias is None), []).append(layer)
        for group in groups.values():
            if len(group) < 2:
                continue
            if written is None:  # both once, for the first group found
                written = mutated_alias_nodes(graph)
                order = {n: i for i, n in enumerate(graph.nodes)}
            done += _merge(x, group, framework, written, order)
    return done
