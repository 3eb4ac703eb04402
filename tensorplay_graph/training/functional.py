"""Framework functions without a prim, differentiated in the graph instead of on a tape.

An opaque node (:mod:`.opaque`) runs its op under the framework's autograd and keeps the
framework's record (a *tape*) alive until the backward: Python work per call, tensors the
min-cut cannot see or choose, and no CUDA-graph replay (a tape is not a tensor). The ops
here are common in real models and have a simple backward that plain graph nodes express:

* :func:`simplify` (before the backward is built) drops ``x.to(<x's own device>)`` (HF
  models move position embeddings "to the device") and rewrites torch's
  ``cross_entropy`` (mean / sum / none, no class weights or smoothing) into prims: the
  loss is ``logsumexp(x) - x[target]``, so the backward is one pointwise pass over ``x``
  from two saved row statistics -- not the float32 ``log_softmax`` the eager op saves.
* :func:`vjp_rule` gives the backward of ``cat`` (slices of the gradient), ``split`` /
  ``chunk`` (one ``cat`` of the pieces' gradients), torch's ``embedding``
  (``aten.embedding_dense_backward``, eager's own kernel) and torch's
  ``scaled_dot_product_attention`` (its fused forward / backward aten pair, :mod:`.attention`).

Anything outside the stated conditions stays opaque: the framework's autograd is always
correct.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional, Tuple

from ..ir.meta import IOTA, TensorMeta, tensor_meta_of
from ..ir.node import Node
from ..prims import prim_name
from ..prims.losses import plain_reduction, reduce_rows
from .attention import ATTENTION, attention_vjp, rewrite_attention

__all__ = ["simplify", "vjp_rule"]

#: ``node.meta`` key: the value carries no gradient (a row maximum subtracted for stability).
STOP_GRADIENT = "stop_gradient"


def _bind(fn: Callable, node: Node) -> Optional[Dict[str, Any]]:
    try:
        bound = inspect.signature(fn).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def _torch_function(node: Node, name: str, module: str = "torch.nn.functional") -> bool:
    if node.op != "call_function":
        return False
    import importlib
    try:
        return node.target is getattr(importlib.import_module(module), name)
    except ImportError:
        return False


# ----------------------------------------------------------------------------- forward rewrites

def simplify(jgm: Any, framework: str) -> None:
    """Rewrite ``jgm`` (normalized, shape-propagated) as described in the module docstring."""
    graph = jgm.graph
    for node in list(graph.nodes):
        if _same_device_move(node):
            _replace(node, node.args[0])
        elif framework == "torch" and prim_name(node) == "cross_entropy":
            _cross_entropy(jgm, node)
        elif framework == "torch" and _torch_function(node, "scaled_dot_product_attention"):
            rewrite_attention(node, _replace, jgm)


def _replace(node: Node, new: Node) -> None:
    """``node``'s uses (graph arguments and users' canonical ``prim_args``) become ``new``."""
    from ..ir.node import map_arg
    for user in list(node.users):
        if "prim_args" in user.meta:
            user.meta["prim_args"] = map_arg(user.meta["prim_args"],
                                             lambda n: new if n is node else n)
    node.replace_all_uses_with(new)
    node.graph.erase_node(node)


def _same_device_move(node: Node) -> bool:
    """``x.to(device)`` / ``x.to(device=...)`` onto the device ``x`` is on: ``x`` itself."""
    if node.op != "call_method" or node.target != "to" or node.meta.get("prim") is not None:
        return False
    source, out = tensor_meta_of(node.args[0] if node.args else None), tensor_meta_of(node)
    if source is None or out is None or len(node.args) > 2 or \
            set(node.kwargs) - {"device", "non_blocking"}:
        return False
    device = node.args[1] if len(node.args) == 2 else node.kwargs.get("device")
    if device is None or not (hasattr(device, "type") or isinstance(device, str)):
        return False
    return (out.device, out.dtype, out.shape) == (source.device, source.dtype, source.shape) and \
        not any(u.op == "output" for u in node.users)


def _cross_entropy(jgm: Any, node: Node) -> None:
    """The ``cross_entropy`` prim as ``logsumexp(x) - x[target]`` in plain prims, for 2-d
    float32 / float64 logits; why this is not ``decompose``'s ``cross_entropy_rows``:
    ``prims/losses.py``. Both take the same calls (``plain_reduction``) and reduce the rows
    the same way (``reduce_rows``)."""
    import torch
    from ..prims.emit import Emitter
    args = node.meta["prim_args"]
    mode = plain_reduction(args)
    x, target = args["a"], args["target"]
    xm, tm = tensor_meta_of(x), tensor_meta_of(target)
    if (mode is None or len(xm.shape) != 2 or tm.shape != xm.shape[:1]
            or xm.dtype not in ("float32", "float64") or tm.dtype not in ("int64", "int32")):
        return
    graph = jgm.graph
    # int32 class indices: generated kernels compute them (IOTA); eager nodes read the constant
    name = f"_iota32_{xm.shape[1]}_{xm.device.replace(':', '_')}"
    if not jgm._has_attr(name):
        jgm._set_attr(name, torch.arange(xm.shape[1], device=xm.device, dtype=torch.int32))
    with graph.inserting_before(node):
        iota = graph.get_attr(name)
        iota.meta["tensor_meta"] = TensorMeta((xm.shape[1],), "int32", xm.device)
        iota.meta[IOTA] = True  # kernels compute it from the index instead of reading it
        e = Emitter(graph, "torch")
        rows = _rows(xm.shape[0], xm.shape[1])
        flat = len(rows) == 2
        source = _upcast_source(e, x)

        # one view of the logits, read once by each kernel (views first: a view between the
        # cast and the reduction splits the kernel)
        base = x if source is None else source
        view = base if flat else e.reshape(base, rows)

        def logits() -> Node:
            # HF upcasts 16-bit logits right before the loss: each reduction casts them
            # again itself, so no float32 copy of the logits is ever written out
            return view if source is None else e.cast(view, xm.dtype)

        xr, column = logits(), iota if flat else e.reshape(iota, rows[1:])
        column.meta[IOTA] = True  # a reshape of the contiguous arange: still k at offset k
        peak = _reduce(e, "amax", xr, stop=True)
        # a cast of its own for the second pass too: a cast both passes read is written out
        lse = e.add(e.log(_reduce(e, "sum", e.exp(e.sub(logits(), peak)))), peak)
        hit = e.eq(column, e.reshape(target, (rows[0],) + (1,) * (len(rows) - 1)))
        picked = _reduce(e, "sum", e.where(hit, logits(), 0.0))
        if not flat:
            lse, picked = e.reshape(lse, (rows[0], 1)), e.reshape(picked, (rows[0], 1))
        valid = e.cast(e.unsqueeze(e.ne(target, args["ignore_index"]), 1), xm.dtype)
        losses = e.mul(e.sub(lse, picked), valid)
        # (n, 1) losses: "none" reshapes them; a reshape before the sum would split its kernel
        out = e.reshape(losses, xm.shape[:1]) if mode == "none" else \
            reduce_rows(e, losses, valid, mode)
    _replace(node, out)


def _prim_input(x: Any, names: Tuple[str, ...]) -> Optional[Node]:
    prim = x.meta.get("prim") if isinstance(x, Node) else None
    if prim is None or prim.name not in names:
        return None
    source = x.meta.get("prim_args", {}).get("a")
    return source if tensor_meta_of(source) is not None else None


def _upcast_source(e: Any, x: Node) -> Optional[Node]:
    """A 16-bit tensor of ``x``'s shape whose float cast ``x`` is (``x = y.float()`` or
    ``y.float().view(...)``), or None."""
    viewed = _prim_input(x, ("view", "reshape"))
    source = _prim_input(viewed if viewed is not None else x, ("cast",))
    if source is None or tensor_meta_of(source).dtype not in ("float16", "bfloat16"):
        return None
    return source if viewed is None else e.reshape(source, tensor_meta_of(x).shape)


def _max_row() -> int:
    try:  # the longest row Triton's row kernels reduce in one program
        from ..backends.triton.codegen_rows import MAX_ROW
        return MAX_ROW
    except ImportError:  # pragma: no cover - the package ships it
        return 32768


def _rows(n: int, classes: int) -> Tuple[int, ...]:
    """``(n, classes)``, or ``(n, a, b)`` with ``a * b == classes`` and ``b`` short enough
    for one fused row kernel: GPT-2's 50257 classes reduce as 29 rows of 1733, so the
    float32 logits are never written out between the cast and the reduction."""
    limit = _max_row()
    if classes <= limit:
        return (n, classes)
    for a in range(2, classes):
        if classes % a == 0 and classes // a <= limit:
            return (n, a, classes // a)
    return (n, classes)  # a prime class count: one long row


def _reduce(e: Any, op: str, x: Node, stop: bool = False) -> Node:
    """``op`` over every dim of ``x`` but the first, innermost first (keepdim)."""
    for dim in reversed(range(1, len(e.shape(x)))):
        x = getattr(e, op)(x, [dim], True)
        if stop:
            x.meta[STOP_GRADIENT] = True  # lse's gradient through the maximum is zero
    return x


# ----------------------------------------------------------------------------- backward rules

def vjp_rule(node: Node, framework: str) -> Optional[Callable[..., Dict[Node, Any]]]:
    """``rule(e, grad, parts, node, needs) -> {input node: gradient}`` for ``node``, or None
    (opaque). ``grad`` is the output's gradient, ``parts`` (tuple results) index -> gradient,
    ``needs`` the nodes that need a gradient; a rule returning None leaves the node opaque."""
    if node.op == "call_method" and node.target in ("split", "chunk"):
        return _split_rule
    if node.op == "call_function" and getattr(node.target, "__name__", "") in ("split", "chunk") \
            and getattr(node.target, "__module__", "") in ("torch", "torch.functional") \
            and node.args:
        return _split_rule
    if node.op == "call_function" and getattr(node.target, "__name__", "") in ("cat", "concat") \
            and str(getattr(node.target, "__module__", "")).split(".")[0] in ("torch", "tensorplay") \
            and tensor_meta_of(node) is not None and node.args and isinstance(node.args[0], (list, tuple)):
        return _cat_rule
    if framework == "torch" and _torch_function(node, "embedding"):
        return _embedding_rule
    if ATTENTION in node.meta:
        return attention_vjp
    return None


def _dim(node: Node, position: int, default: int = 0) -> int:
    dim = node.args[position] if len(node.args) > position else node.kwargs.get("dim", default)
    return dim


def _split_rule(e: Any, grad: Any, parts: Optional[Dict[int, Any]], node: Node,
                needs: set) -> Any:
    metas = node.meta.get("tensor_meta")
    source = node.args[0]
    if not isinstance(metas, tuple) or parts is None or len(parts) != len(metas) or \
            any(parts.get(i) is None for i in range(len(metas))):
        return None  # a piece without a gradient would need zeros: stays opaque
    rank = len(tensor_meta_of(source).shape)
    dim = _dim(node, 2) % rank
    pieces = [e.to_dtype(parts[i], metas[i].dtype) for i in range(len(metas))]
    return {source: emit_cat(e, pieces, dim, tensor_meta_of(source))}


def emit_cat(e: Any, pieces: list, dim: int, meta: TensorMeta) -> Node:
    """One ``<framework>.cat(pieces, dim)`` node whose result has ``meta``'s shape."""
    node = e.graph.call_function(e.fw.cat, (tuple(pieces), dim))
    node.meta["tensor_meta"] = TensorMeta(meta.shape, meta.dtype, meta.device)
    return node


def _cat_rule(e: Any, grad: Any, parts: Any, node: Node, needs: set) -> Any:
    inputs = list(node.args[0])
    out = tensor_meta_of(node)
    dim = _dim(node, 1) % len(out.shape)
    found, start = {}, 0
    for value in inputs:
        meta = tensor_meta_of(value)
        if meta is None:
            return None
        if len(meta.shape) != len(out.shape):  # torch's legacy empty 1-D operand
            if meta.numel == 0:
                continue
            return None
        size = meta.shape[dim]
        if size and value in needs:
            if size == out.shape[dim]:
                piece = grad
            else:
                index = (slice(None),) * dim + (slice(start, start + size),)
                piece = e.getitem(grad, index)
            found[value] = piece if value not in found else e.add(found[value], piece)
        start += size
    return found


def _embedding_rule(e: Any, grad: Any, parts: Any, node: Node, needs: set) -> Any:
    import torch
    args = _bind(torch.nn.functional.embedding, node)
    if args is None or args["max_norm"] is not None or args["sparse"]:
        return None
    weight, indices = args["weight"], args["input"]
    if weight not in needs:
        return {}  # integer indices carry no gradient
    meta = tensor_meta_of(weight)
    if meta is None or not isinstance(indices, Node) or tensor_meta_of(grad) is None:
        return None
    padding = args["padding_idx"]
    padding = -1 if padding is None else padding % meta.shape[0]
    out = e.graph.call_function(torch.ops.aten.embedding_dense_backward.default,
                                (grad, indices, meta.shape[0], padding,
                                 bool(args["scale_grad_by_freq"])))
    out.meta["tensor_meta"] = TensorMeta(meta.shape, tensor_meta_of(grad).dtype, meta.device)
    return {weight: out}

