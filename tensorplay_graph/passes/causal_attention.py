"""An attention mask the program built as exactly causal becomes ``is_causal=True`` (part of
``decompose``).

transformers builds GPT-2's and Llama's causal mask as a boolean ``(batch, 1, S, S)`` tensor
when it runs on CUDA, and torch's ``scaled_dot_product_attention`` then, in every layer, turns
it into an additive mask (three kernels) and runs cuDNN's attention over every tile with it.
Told ``is_causal=True`` instead, cuDNN skips the masked tiles and no mask is made. For a square
mask (as many queries as keys) torch's causal alignment is the mask's, and every query keeps
at least one key, so the attention weights are the same numbers.

Only masks the program made while it was captured change: a ``_const`` (``capture``'s
``meta["made_by_program"]``), read through views that keep its last two sizes at most
(``mask[None, None].expand(b, 1, s, s)``), whose value is
the lower triangle of ones for every broadcast entry. A parameter, buffer or global is left
alone: the caller may write it between calls. Only torch's attention, without dropout.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from ..frameworks import adapter_for
from ..ir.graph_module import get_attr_path
from ..ir.meta import tensor_meta_of
from ..ir.node import Node

log = logging.getLogger(__name__)

__all__ = ["attention_note", "causal_constant", "causal_masks_to_flags", "is_attention"]

_MASK_VIEWS = frozenset({"expand", "view", "reshape", "unsqueeze"})


#: torch's ``scaled_dot_product_attention`` parameters, in order
SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
               "enable_gqa")


def attention_params(node: Node) -> dict:
    """An attention call's arguments by parameter name, however they were passed (albert
    passes ``query=`` / ``key=`` / ``value=`` as keywords)."""
    params = dict(zip(SDPA_PARAMS, node.args))
    params.update(node.kwargs)
    return params


def is_attention(node: Node) -> bool:
    """A call of torch's ``scaled_dot_product_attention``."""
    return node.op == "call_function" and \
        node.target is adapter_for("torch").functional().scaled_dot_product_attention


def attention_note(node: Node) -> Optional[str]:
    """Why torch's attention call ``node`` runs on the framework's kernels (``explain()``'s
    barrier line for it), or None for any other node."""
    if node.op != "call_function" or \
            getattr(node.target, "__name__", "") != "scaled_dot_product_attention":
        return None
    try:
        if not is_attention(node):
            return None
    except ImportError:  # TensorPlay without torch
        return None
    causal = (" It reads no mask: the causal mask the program built became is_causal=True, so "
              "the masked tiles are skipped.") if node.meta.get("causal_from_mask") else ""
    return ("attention stays on the framework's fused kernels (flash / cuDNN / memory-efficient "
            "on CUDA, flash on the CPU), which no backend here beats; it runs eagerly." + causal)


def causal_constant(mask: Any, root: Any, queries: Optional[int], keys: Optional[int]) -> bool:
    """Whether ``mask`` (a graph value) is a boolean mask the program made while captured
    (through views at most), exactly causal over square scores for every broadcast entry:
    what transformers builds when a compiler traces it instead of passing ``is_causal=True``.
    Such a mask and ``is_causal=True`` select the same scores."""
    while isinstance(mask, Node) and mask.op == "call_method" and mask.target in _MASK_VIEWS:
        # a view keeping the last two sizes keeps every (query, key) entry where it was
        if _last_two(mask) != (queries, keys) or _last_two(mask.args[0]) != (queries, keys):
            return False
        mask = mask.args[0]
    if not (isinstance(mask, Node) and mask.op == "get_attr" and mask.meta.get("made_by_program")) \
            or root is None or queries is None or queries != keys:
        return False
    try:
        value = get_attr_path(root, mask.target)
    except AttributeError:
        return False
    torch = adapter_for("torch").module
    if not isinstance(value, torch.Tensor) or value.dtype != torch.bool or value.dim() < 2 or \
            tuple(value.shape[-2:]) != (queries, keys):
        return False
    causal = torch.ones(queries, keys, dtype=torch.bool, device=value.device).tril()
    return bool(torch.equal(value, causal.expand_as(value)))


def _last_two(value: Any) -> Optional[tuple]:
    meta = tensor_meta_of(value)
    return tuple(meta.shape[-2:]) if meta is not None and meta.ndim >= 2 else None


def _seq(value: Any) -> Optional[int]:
    meta = tensor_meta_of(value)
    return meta.shape[-2] if meta is not None and meta.ndim >= 2 else None


def causal_masks_to_flags(gm: Any, framework: str) -> int:
    """Rewrite each attention call the module docstring describes; returns how many."""
    graph = getattr(gm, "graph", None)
    if framework != "torch" or graph is None:
        return 0
    done, attention = 0, adapter_for("torch").functional().scaled_dot_product_attention
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not attention or len(node.args) > 3:
            continue
        kwargs, params = dict(node.kwargs), attention_params(node)
        if kwargs.get("dropout_p", 0.0) != 0.0 or kwargs.get("is_causal", False) is not False:
            continue
        q, k = params.get("query"), params.get("key")
        if not causal_constant(kwargs.get("attn_mask"), gm, _seq(q), _seq(k)):
            continue
        kwargs["attn_mask"], kwargs["is_causal"] = None, True
        node.kwargs = kwargs
        node.meta["causal_from_mask"] = True
        done += 1
    if done:
        log.debug("decompose: %d attention call(s) told is_causal instead of a causal mask", done)
    return done
