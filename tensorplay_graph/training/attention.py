"""torch's ``scaled_dot_product_attention`` as its fused forward and backward aten ops.

Kept opaque, attention runs on a tape (:mod:`.opaque`): the framework's autograd record
lives until the backward, outside the graph. Eager itself calls one fused kernel pair; this
module writes that pair into the joint graph instead: the forward node is the aten op eager
would pick (``torch._fused_sdp_choice``: flash on the CPU; flash, memory-efficient or cuDNN on
CUDA), returning the output plus what its backward reads (log-sum-exp, RNG state, ...), and
the backward node is the matching ``*_backward`` op -- plain tensors in, plain tensors out,
so the min-cut sees them and a CUDA graph can replay them.

Before a program uses the pair, :func:`_verified` runs it once on random data of the
call's shapes, dtype and device against SDPA's math kernel in float32: a variant whose
signature or numerics differ on this torch build (or a mask, dropout, GQA, another backend)
keeps the opaque tape, which is always correct.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Dict, Optional, Tuple

from ..ir.meta import TensorMeta, tensor_meta_of
from ..passes.causal_attention import SDPA_PARAMS, attention_params, causal_constant, is_attention
from ..ir.node import Node

log = logging.getLogger("tensorplay_graph.compile")

__all__ = ["rewrite_attention", "attention_vjp"]

_PARAMS = SDPA_PARAMS
_CHECKED: Dict[Tuple, Optional["_Variant"]] = {}


class _Variant:
    """One fused forward / backward op pair and how their arguments line up."""

    def __init__(self, name: str, forward: Any, backward: Any, fwd_args: Any, bwd_args: Any):
        self.name, self.forward, self.backward = name, forward, backward
        self.fwd_args, self.bwd_args = fwd_args, bwd_args


def _variants() -> Dict[str, _Variant]:
    import torch
    aten = torch.ops.aten
    return {
        "flash_cpu": _Variant(
            "flash_cpu", aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
            lambda q, k, v, causal, scale: ((q, k, v, 0.0, causal), {"scale": scale}),
            lambda g, q, k, v, o, causal, scale: ((g, q, k, v, o[0], o[1], 0.0, causal),
                                                  {"scale": scale})),
        "flash": _Variant(
            "flash", aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_flash_attention_backward.default,
            lambda q, k, v, causal, scale: ((q, k, v, 0.0, causal, False), {"scale": scale}),
            lambda g, q, k, v, o, causal, scale: (
                (g, q, k, v, o[0], o[1], o[2], o[3], o[4], o[5], 0.0, causal, o[6], o[7]),
                {"scale": scale})),
        # cuDNN's pair (what torch 2.11 picks for 16-bit attention on Hopper). Its backward
        # takes the bias as a plain Tensor; None passes an undefined one, as torch's own
        # derivative does.
        "cudnn": _Variant(
            "cudnn", aten._scaled_dot_product_cudnn_attention.default,
            aten._scaled_dot_product_cudnn_attention_backward.default,
            lambda q, k, v, causal, scale: ((q, k, v, None, True, 0.0, causal, False),
                                            {"scale": scale}),
            lambda g, q, k, v, o, causal, scale: (
                (g, q, k, v, o[0], o[1], o[6], o[7], None, o[2], o[3], o[4], o[5], 0.0,
                 causal), {"scale": scale})),
        "efficient": _Variant(
            "efficient", aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_efficient_attention_backward.default,
            lambda q, k, v, causal, scale: ((q, k, v, None, True, 0.0, causal), {"scale": scale}),
            lambda g, q, k, v, o, causal, scale: (
                (g, q, k, v, None, o[0], o[1], o[2], o[3], 0.0, [True, True, True, False],
                 causal), {"scale": scale})),
    }


def _choose(q: Any, k: Any, v: Any, causal: bool, scale: Any) -> Optional[str]:
    import torch
    from torch.nn.attention import SDPBackend
    try:
        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=scale)
    except (RuntimeError, TypeError):
        return None
    if choice == SDPBackend.FLASH_ATTENTION.value:
        return "flash_cpu" if q.device.type == "cpu" else "flash"
    if choice == SDPBackend.EFFICIENT_ATTENTION.value and q.device.type == "cuda":
        return "efficient"
    if choice == SDPBackend.CUDNN_ATTENTION.value and q.device.type == "cuda":
        return "cudnn"
    return None


def _verified(metas: Tuple[TensorMeta, ...], causal: bool, scale: Any) -> Optional[_Variant]:
    """The op pair eager uses for these inputs, checked once against the math kernel."""
    key = (metas, causal, scale)
    if key in _CHECKED:
        return _CHECKED[key]
    import torch
    F = torch.nn.functional
    found = None
    try:
        gen = torch.Generator(device=metas[0].device).manual_seed(0)
        if not all(_dense(m) for m in metas):
            raise ValueError(f"operands not 4-D with known strides: {metas}")
        q, k, v = (_strided(m).normal_(generator=gen) for m in metas)
        name = _choose(q, k, v, causal, scale)
        if name is None:
            raise ValueError("eager's kernel for these inputs has no fused pair here")
        variant = _variants()[name]
        # The reference is SDPA's definition (the math kernel in float32), not eager's fused
        # kernel: on the H200, after a GPT-2 eager step in the same process, torch 2.11's
        # cuDNN attention backward returned gradients off by 6.5 for this check's inputs
        # while the pair below matched the math kernel (benchmarks/RESULTS.md, 2026-12-02).
        leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            want = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
        grad = torch.randn(want.shape, generator=gen, device=want.device, dtype=q.dtype)
        want_grads = torch.autograd.grad(want, leaves, grad.float())
        args, kwargs = variant.fwd_args(q, k, v, causal, scale)
        outs = variant.forward(*args, **kwargs)
        args, kwargs = variant.bwd_args(grad, q, k, v, outs, causal, scale)
        grads = variant.backward(*args, **kwargs)[:3]
        tol = 1e-4 if q.dtype in (torch.float32, torch.float64) else 2e-2
        for got, expected in zip((outs[0], *grads), (want, *want_grads)):
            torch.testing.assert_close(got.float(), expected, rtol=tol, atol=tol)
        found = variant
    except Exception as exc:  # noqa: BLE001 - any mismatch keeps the opaque tape
        log.info("attention keeps its opaque tape (%s check: %s: %s)", metas[0].device,
                 type(exc).__name__, str(exc)[:300])
        found = None
    _CHECKED[key] = found
    return found


def _strided(meta: TensorMeta) -> Any:
    """An uninitialized tensor with ``meta``'s shape, strides, dtype and device."""
    import torch
    return torch.empty_strided(meta.shape, meta.stride, device=meta.device,
                               dtype=getattr(torch, meta.dtype))


def _dense(meta: TensorMeta) -> bool:
    return meta.stride is not None and len(meta.shape) == 4


def _device(device: Any) -> str:
    """``cuda`` and ``cuda:0`` (the current device) are one device."""
    import torch
    found = torch.device(device)
    if found.type == "cuda" and found.index is None and torch.cuda.is_available():
        found = torch.device("cuda", torch.cuda.current_device())
    return str(found)


def _unsupported(params: Dict[str, Any], metas: Tuple[Any, ...]) -> Optional[str]:
    """Why an SDPA call cannot take a fused pair, or None."""
    if set(params) - set(_PARAMS):
        return f"unknown arguments {sorted(set(params) - set(_PARAMS))}"
    mask = params.get("attn_mask")
    if mask is not None:
        where = f"{mask.op} {mask.target}" if isinstance(mask, Node) else type(mask).__name__
        return f"a mask that is not a constant causal one ({where}: {tensor_meta_of(mask)})"
    if params.get("dropout_p", 0.0) != 0.0:
        return f"dropout_p={params['dropout_p']}"
    if any(m is None for m in metas):
        return "an operand without tensor metadata"
    if len({(m.dtype, _device(m.device)) for m in metas}) != 1:
        return f"operands of several dtypes / devices: {[(m.dtype, str(m.device)) for m in metas]}"
    # transformers passes enable_gqa=True whenever there is no mask; with as many key / value
    # heads as query heads it changes nothing
    if params.get("enable_gqa", False) and \
            len({m.shape[-3] if len(m.shape) >= 3 else None for m in metas}) != 1:
        return "grouped query heads (enable_gqa)"
    return None


def rewrite_attention(node: Node, replace: Any, root: Any = None) -> None:
    """Replace an SDPA call by the verified fused forward op (see module docstring); a
    constant causal mask (read from ``root``, the graph's module) becomes ``is_causal``."""
    if not is_attention(node):
        return
    params = attention_params(node)
    q_meta, k_meta = (tensor_meta_of(params.get(name)) for name in ("query", "key"))
    if params.get("attn_mask") is not None and not params.get("is_causal", False) and \
            q_meta is not None and k_meta is not None and \
            causal_constant(params["attn_mask"], root, q_meta.shape[-2], k_meta.shape[-2]):
        params["attn_mask"], params["is_causal"] = None, True
    metas = tuple(tensor_meta_of(params.get(name)) for name in _PARAMS[:3])
    causal, scale = bool(params.get("is_causal", False)), params.get("scale")
    why = _unsupported(params, metas)
    variant = None if why else _verified(metas, causal, scale)
    if variant is None:
        log.info("attention %s keeps its opaque tape: %s", node.name,
                 why or "the fused pair was not verified for these inputs (see above)")
        return
    q, k, v = (params[name] for name in _PARAMS[:3])
    samples = _sample_outputs(variant, metas, causal, scale)
    graph = node.graph
    with graph.inserting_before(node):
        args, kwargs = variant.fwd_args(q, k, v, causal, scale)
        fused = graph.call_function(variant.forward, args, kwargs)
        fused.meta["tensor_meta"] = tuple(_sample_meta(s) for s in samples)
        fused.meta[ATTENTION] = (variant.name, causal, scale)
        parts = []
        for i, sample in enumerate(samples):
            part = graph.call_function(operator.getitem, (fused, i))
            meta = _sample_meta(sample)
            if meta is not None:
                part.meta["tensor_meta"] = meta
            parts.append(part)
    fused.meta[ATTENTION_PARTS] = parts
    replace(node, parts[0])


#: ``node.meta`` keys on a fused attention forward node: (variant, is_causal, scale) and
#: the getitem node of each of its outputs.
ATTENTION, ATTENTION_PARTS = "attention", "attention_parts"


def _sample_outputs(variant: _Variant, metas: Any, causal: bool, scale: Any) -> tuple:
    import torch
    q, k, v = (_strided(m).normal_() for m in metas)
    args, kwargs = variant.fwd_args(q, k, v, causal, scale)
    return tuple(variant.forward(*args, **kwargs))


def _sample_meta(value: Any) -> Optional[TensorMeta]:
    from ..frameworks import is_tensor, tensor_meta
    if not is_tensor(value):
        return None
    meta = tensor_meta(value)
    return TensorMeta(meta.shape, meta.dtype, meta.device, stride=meta.stride)


def attention_vjp(e: Any, grad: Any, parts: Optional[Dict[int, Any]], node: Node,
                  needs: set) -> Any:
    """The fused backward op for a fused attention forward ``node`` (``parts[0]``: the
    output's gradient)."""
    name, causal, scale = node.meta[ATTENTION]
    variant = _variants()[name]
    if not parts or parts.get(0) is None:
        return {}
    q, k, v = node.args[:3]
    outs = node.meta[ATTENTION_PARTS]
    args, kwargs = variant.bwd_args(parts[0], q, k, v, outs, causal, scale)
    graph = e.graph
    backward = graph.call_function(variant.backward, args, kwargs)
    metas = tuple(TensorMeta(tensor_meta_of(x).shape, tensor_meta_of(x).dtype, tensor_meta_of(x).device) for x in (q, k, v))
    backward.meta["tensor_meta"] = metas + ((None,) if name == "efficient" else ())
    found = {}
    for i, source in enumerate((q, k, v)):
        piece = graph.call_function(operator.getitem, (backward, i))
        piece.meta["tensor_meta"] = metas[i]
        found[source] = piece if source not in found else e.add(found[source], piece)
    return found
