"""What AOTAutograd decomposes before our passes see its graphs, and aten-graph cleanup.

Backward aten ops (``tanh_backward``, ``threshold_backward``,
``native_layer_norm_backward``, ``_softmax_backward_data`` ...) have no prim;
torch's own decompositions (the ones Inductor uses) rewrite them into pointwise
ops, reductions and views that our prims express, so the backward graph fuses.
Forward ops that already have a fused prim (``softmax``, ``addmm``, ``gelu``)
are left whole.
"""

from __future__ import annotations

from types import SimpleNamespace
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
    import torch
    from torch._decomp import get_decompositions
    table = get_decompositions(_decomposed_ops())
    backward = torch.ops.aten.native_layer_norm_backward.default
    table[backward] = _layer_norm_backward_as_cpu_eager(table[backward])
    return table


def _layer_norm_backward_as_cpu_eager(decomposed: Any) -> Any:
    """torch's ``native_layer_norm_backward`` decomposition, except on the CPU in the rows
    whose sums are not finite (an infinite weight or gradient): there eager's CPU kernel's
    formula (``layer_norm_kernel.cpp``, ``rstd * gx + b * x + c``), which places NaN and +-inf
    differently from the decomposition's centered order (grad fuzz seed 100890864: eager NaN,
    the decomposition -inf). The formula is our own VJP rule's
    (``prims.vjps_norms.layer_norm_special_rows_cpu``), run on torch's ops."""
    import torch
    from ..prims.vjps_norms import layer_norm_special_rows_cpu
    ops = _torch_ops(torch)

    def layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                            output_mask):
        found = decomposed(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                           output_mask)
        if not output_mask[0] or input.device.type != "cpu" or input.numel() == 0:
            return found
        dims = list(range(input.dim() - len(normalized_shape), input.dim()))
        wide = torch.float32 if input.dtype in (torch.float16, torch.bfloat16) else input.dtype
        x, gx = input.to(wide), grad_out.to(wide)
        if weight is not None:
            gx = gx * weight.to(wide)
        mean = mean.to(wide).reshape(mean.shape + (1,) * (x.dim() - mean.dim()))
        rstd = rstd.to(wide).reshape(rstd.shape + (1,) * (x.dim() - rstd.dim()))
        grad_input = layer_norm_special_rows_cpu(ops, found[0].to(wide), gx, x, mean, rstd,
                                                 dims)
        return (grad_input.to(found[0].dtype),) + tuple(found[1:])
    return layer_norm_backward


def _torch_ops(torch: Any) -> Any:
    """The emitter calls ``layer_norm_special_rows_cpu`` makes, as torch ops on the (traced)
    tensors of a decomposition."""
    return SimpleNamespace(shape=lambda x: tuple(x.shape),
                           sum=lambda x, dims, keepdim: x.sum(dims, keepdim=keepdim),
                           **{name: getattr(torch, name) for name in
                              ("mul", "sub", "add", "neg", "where", "eq", "logical_and")})


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
