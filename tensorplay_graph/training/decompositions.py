"""What AOTAutograd decomposes before our passes see its graphs, and aten-graph cleanup.

Backward aten ops (``tanh_backward``, ``threshold_backward``,
``native_layer_norm_backward``, ``_softmax_backward_data`` ...) have no prim;
torch's own decompositions (the ones Inductor uses) rewrite them into pointwise
ops, reductions and views that our prims express, so the backward graph fuses.
Forward ops that already have a fused prim (``softmax``, ``addmm``, ``gelu``)
are left whole.
"""

from __future__ import annotations

from typing import Any, Dict


def _decomposed_ops() -> list:
    import torch
    aten = torch.ops.aten
    return [
        aten.tanh_backward, aten.sigmoid_backward, aten.threshold_backward,
        aten.gelu_backward, aten.silu_backward, aten.hardtanh_backward,
        aten.leaky_relu_backward, aten.elu_backward, aten.softplus_backward,
        aten._softmax_backward_data, aten._log_softmax_backward_data,
        aten.native_layer_norm_backward, aten.native_layer_norm, aten.silu,
        aten.embedding_dense_backward, aten.t, aten._unsafe_view, aten.rsub,
        aten.masked_fill, aten.mse_loss, aten.mse_loss_backward,
    ]


def training_decompositions() -> Dict[Any, Any]:
    """``{aten overload: decomposition}`` given to ``aot_autograd(decompositions=...)``."""
    from torch._decomp import get_decompositions
    return get_decompositions(_decomposed_ops())


def drop_detaches(aten_gm: Any) -> None:
    """Replace ``aten.detach`` / ``aten.alias`` of values that are not graph outputs by
    their input: the compiled halves run without autograd recording, where a detach
    is the identity (a graph output keeps it: AOTAutograd tracks output aliasing)."""
    import torch
    identity = {torch.ops.aten.detach.default, torch.ops.aten.alias.default}
    changed = False
    for node in list(aten_gm.graph.nodes):
        if node.op != "call_function" or node.target not in identity:
            continue
        if any(user.op == "output" for user in node.users):
            continue
        node.replace_all_uses_with(node.args[0])
        aten_gm.graph.erase_node(node)
        changed = True
    if changed:
        aten_gm.recompile()


def views_as_reshapes(aten_gm: Any) -> None:
    """``aten.view`` / ``aten._unsafe_view`` of values that are not graph outputs become
    ``aten.reshape``.

    Why: AOTAutograd turns ``reshape`` into ``view`` where the *eager* strides allow it, but a
    fused kernel returns its outputs in its own (contiguous) layout, where the same view can be
    impossible (rotary embeddings: ``(q * cos).transpose(1, 2).view(b, s, -1)``). The halves are
    functional graphs, so a reshape that copies is the same value; graph outputs keep their
    views, whose aliasing AOTAutograd tracks.
    """
    import torch
    views = {torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default}
    changed = False
    for node in aten_gm.graph.nodes:
        if node.op == "call_function" and node.target in views and \
                not any(user.op == "output" for user in node.users):
            node.target = torch.ops.aten.reshape.default
            changed = True
    if changed:
        aten_gm.recompile()
