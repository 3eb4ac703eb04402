"""``decompose``: inference-mode calls rewritten into what backends fuse.

* Dropout in eval (``F.dropout(x, p, training=False)``, ``nn.Dropout`` in eval, the
  ``dropout1d/2d/3d`` and alpha variants) returns its input itself in both frameworks:
  the node is removed and its readers read the input (same aliasing as eager).
* A cast to the dtype the tensor already has (``x.float()`` on float32, ``x.to(x.dtype)``)
  returns ``x`` itself in torch and a tensor sharing its memory in TensorPlay: it is
  removed too, so a later write through it reaches ``x`` as in eager (a fused cast would
  write into a copy).
* Batch norm in inference (``training=False`` with running statistics) becomes
  ``batch_norm_channels(a, mean, var, weight, bias, eps)`` over per-channel operands
  reshaped to broadcast against the input (``(C, 1, 1)`` for NCHW): a pointwise scale /
  shift that joins the region of the convolution's epilogue (relu, residual add).
  The reshapes are views of the parameters, run eagerly before the region.
* ``cross_entropy`` with class-index targets becomes a row reduction and its mean / sum
  (:mod:`.decompose_losses`).
* ``x.split(n, dim)`` / ``x.chunk(k, dim)`` whose pieces are all taken by index (``q, k, v =
  qkv.split(d, 2)``) become one basic slice of ``x`` per piece (views of ``x``, as eager's
  pieces are), so a kernel reading a piece reads ``x`` by index arithmetic.
* An attention call given a causal boolean mask the program made becomes ``is_causal=True``
  (:mod:`.causal_attention`).
* A torch CUDA half-precision ``addmm`` / ``linear`` followed by a tanh-GELU becomes one
  ``addmm_gelu`` (cuBLASLt's epilogue; :mod:`.gemm_activation`).
* Small torch CUDA half-precision linear layers reading one input (attention's q / k / v
  projections) become one GEMM over their concatenated weights and a slice per layer
  (:mod:`.merge_linears`).

Runs after ``shape_prop`` (it reads ``tensor_meta``) and gives every new node its
``prim``, ``prim_args`` and ``tensor_meta``. Training-mode calls are left as they are.

>>> decompose(gm)          # doctest: +SKIP
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Optional

from .. import prims
from ..ir.meta import TensorMeta
from ..ir.node import Node, map_arg
from .causal_attention import causal_masks_to_flags
from .decompose_losses import decompose_cross_entropy
from .gemm_activation import fuse_gemm_activations
from .merge_linears import merge_sibling_linears
from .normalize import graph_framework

log = logging.getLogger(__name__)

__all__ = ["decompose", "annotate"]

#: Prims that return their input itself when ``training`` is False.
EVAL_IDENTITIES = frozenset({"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                             "feature_alpha_dropout"})


def annotate(node: Node, framework: str) -> bool:
    """Set ``prim`` / ``prim_args`` / ``tensor_meta`` on a new node from its prim's meta rule;
    False when no prim expresses it or the rule fails (the caller undoes its rewrite)."""
    from ..prims.rules import framework_rules

    found = prims.lookup(node, framework)
    if found is None:
        return False
    node.meta["prim"], node.meta["prim_args"] = found
    metas = map_arg(found[1], lambda n: n.meta.get("tensor_meta"))
    try:
        with framework_rules(framework):
            meta = found[0].meta(**metas)
    except Exception as exc:  # a meta rule refusing: keep the original node
        log.debug("decompose: no meta for %s: %s", node.name, exc)
        return False
    if not isinstance(meta, TensorMeta):
        return False
    node.meta["tensor_meta"] = meta
    return True


def _is_tensor(value: Any) -> bool:
    return isinstance(value, Node) and isinstance(value.meta.get("tensor_meta"), TensorMeta)


def _drop_identity(node: Node) -> bool:
    args = node.meta["prim_args"]
    if args.get("training") is not False or not isinstance(args.get("a"), Node):
        return False
    node.replace_all_uses_with(args["a"])
    node.graph.erase_node(node)
    return True


def _drop_same_dtype_cast(node: Node) -> bool:
    a, meta = node.meta["prim_args"].get("a"), node.meta.get("tensor_meta")
    if not (_is_tensor(a) and isinstance(meta, TensorMeta)) or \
            a.meta["tensor_meta"].dtype != meta.dtype:
        return False
    node.replace_all_uses_with(a)
    node.graph.erase_node(node)
    return True


def _channel_view(graph, value: Any, shape: tuple, framework: str) -> Optional[Node]:
    if value is None:
        return None
    if tuple(value.meta["tensor_meta"].shape) == shape:
        return value
    view = graph.call_method("reshape", (value, shape))
    view.meta["stack"] = value.meta.get("stack")
    return view if annotate(view, framework) else None


def _batch_norm(node: Node, framework: str) -> bool:
    args = node.meta["prim_args"]
    a, mean, var = args.get("a"), args.get("running_mean"), args.get("running_var")
    weight, bias, eps = args.get("weight"), args.get("bias"), args.get("eps")
    if args.get("training") is not False or not (_is_tensor(a) and _is_tensor(mean) and _is_tensor(var)):
        return False
    if any(v is not None and not _is_tensor(v) for v in (weight, bias)) or \
            not isinstance(eps, (int, float)) or isinstance(eps, bool):
        return False
    meta = a.meta["tensor_meta"]
    if meta.ndim < 2:
        return False
    shape = (meta.shape[1],) + (1,) * (meta.ndim - 2)
    graph = node.graph
    created = []
    with graph.inserting_before(node):
        views = []
        for value in (mean, var, weight, bias):
            view = _channel_view(graph, value, shape, framework)
            if value is not None and view is None:
                break
            if view is not None and view is not value:
                created.append(view)
            views.append(view)
        else:
            from ..prims.nn import batch_norm_channels
            new = graph.call_function(batch_norm_channels, (a, *views[:2]),
                                      {"weight": views[2], "bias": views[3], "eps": float(eps)})
            new.meta["stack"] = node.meta.get("stack")
            created.append(new)
            measured = node.meta.get("tensor_meta")
            if annotate(new, framework) and new.meta["tensor_meta"].dtype == node.meta.get(
                    "tensor_meta", meta).dtype:
                if isinstance(measured, TensorMeta) and \
                        measured.shape == new.meta["tensor_meta"].shape:
                    new.meta["tensor_meta"] = measured  # eager's strides (channels_last)
                node.replace_all_uses_with(new)
                graph.erase_node(node)
                return True
    for made in reversed(created):  # a meta rule refused: leave the call as it was
        graph.erase_node(made)
    return False


#: Tensor methods / functions returning views of consecutive pieces along one dim.
_SPLITS = frozenset({"split", "chunk"})


def _is_split(node: Node) -> bool:
    if node.op == "call_method":
        return node.target in _SPLITS
    module = getattr(node.target, "__module__", None) or type(getattr(node.target, "__self__",
                                                                      None)).__name__
    return node.op == "call_function" and getattr(node.target, "__name__", "") in _SPLITS and \
        str(module).startswith(("torch", "tensorplay", "_VariableFunctions"))


def _split_slices(node: Node, framework: str) -> bool:
    """``split`` / ``chunk`` taken apart by index -> one ``x[..., a:b]`` node per piece."""
    metas, base = node.meta.get("tensor_meta"), node.args[0] if node.args else None
    dim = node.kwargs.get("dim", node.args[2] if len(node.args) > 2 else 0)
    users = list(node.users)
    if not (_is_tensor(base) and isinstance(metas, tuple) and metas and isinstance(dim, int)
            and all(isinstance(m, TensorMeta) for m in metas) and users and
            all(u.target is operator.getitem and len(u.args) == 2 and
                isinstance(u.args[1], int) for u in users)):
        return False
    ndim = base.meta["tensor_meta"].ndim
    if not -ndim <= dim < ndim:
        return False
    d, starts = dim % ndim, [0]
    for m in metas:
        starts.append(starts[-1] + m.shape[d])
    graph, made = node.graph, []
    for user in users:
        i = user.args[1] % len(metas)
        with graph.inserting_before(user):
            piece = graph.call_function(operator.getitem, (base, (slice(None),) * d +
                                                           (slice(starts[i], starts[i + 1]),)))
        piece.meta["stack"] = user.meta.get("stack")
        made.append(piece)
        if not annotate(piece, framework) or piece.meta["tensor_meta"].shape != metas[i].shape:
            for new in made:
                graph.erase_node(new)
            return False
        piece.meta["tensor_meta"] = metas[i]  # eager's strides
    for user, piece in zip(users, made):
        user.replace_all_uses_with(piece)
        graph.erase_node(user)
    graph.erase_node(node)
    return True


def decompose(gm: Any) -> Any:
    """Remove eval-mode dropout and same-dtype casts, rewrite inference batch norm and indexed
    splits (module docstring)."""
    graph = getattr(gm, "graph", gm)
    framework = graph_framework(graph)
    removed = rewritten = 0
    for node in list(graph.nodes):
        if node.meta.get("prim") is None and _is_split(node):
            rewritten += _split_slices(node, framework)
            continue
        if node.meta.get("prim") is None or node.op not in ("call_function", "call_method"):
            continue
        if removed or rewritten:  # an earlier rewrite may have replaced this node's inputs
            found = prims.lookup(node, framework)
            if found is None:
                continue
            node.meta["prim"], node.meta["prim_args"] = found
        prim = node.meta["prim"]
        if prim.name in EVAL_IDENTITIES:
            removed += _drop_identity(node)
        elif prim.name == "cast":
            removed += _drop_same_dtype_cast(node)
        elif prim.name == "batch_norm":
            rewritten += _batch_norm(node, framework)
        elif prim.name == "cross_entropy":
            rewritten += decompose_cross_entropy(node, framework)
    rewritten += fuse_gemm_activations(gm, framework)
    rewritten += merge_sibling_linears(gm, framework)
    causal_masks_to_flags(gm, framework)  # arguments only: nothing to normalize again
    if removed or rewritten:
        from .normalize import normalize
        normalize(gm)  # readers' prim_args still name the replaced nodes
        log.debug("decompose: %d identities (eval dropout, same-dtype cast) removed, "
                  "%d batch norms rewritten",
                  removed, rewritten)
    return gm
