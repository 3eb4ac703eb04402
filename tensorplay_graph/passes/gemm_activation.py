"""A GEMM's bias + tanh-GELU moved into cuBLASLt's epilogue (part of ``decompose``).

GPT-2's MLP is ``gelu_new(addmm(bias, x, W))``: cuBLAS writes the product, and a second kernel
reads it back for the activation. ``torch._addmm_activation(bias, x, W, use_gelu=True)`` runs
the bias and the tanh-GELU in the GEMM's epilogue instead (H200, 4096 x 768 @ 3072 bf16,
``benchmarks/gemm_variants_gpu.py``: 0.038 ms against 0.050 for ``addmm`` + the activation).

The rewrite takes ``addmm(c, a, b)`` (``beta = alpha = 1``, ``c`` a 1-d bias of N) or a 2-d
``linear(a, w, bias)``, optionally one ``view`` / ``reshape`` of its result, and the tanh-GELU
of that (:mod:`.gelu_pattern`: the ``gelu`` prim with ``approximate="tanh"``, or the
formula models spell out). Every value in between must be read only by the pattern, and the
activation only by GEMMs (through views): cuBLASLt's GELU gives +0.0 where eager's formula
gives -0.0 (a pre-activation below about -10 in bfloat16: ``x * 0.5 * (1 + tanh(..)) = x * 0``),
and a product never shows that sign (its sum starts from +0.0). Only torch CUDA float16 /
bfloat16 programs change (``TPG_CUBLASLT_GELU=0`` turns the rewrite off). The values differ
from eager's only in rounding: eager rounds the product and each step of the formula to the
dtype, the epilogue rounds once.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Optional, Set, Tuple

from ..ir.meta import tensor_meta_of
from ..ir.node import Node
from ..prims import prim_name as _prim
from .gelu_pattern import prim_args as _args, tanh_gelu_input

__all__ = ["fuse_gemm_activations"]

_DTYPES = frozenset({"float16", "bfloat16"})


def _gemm_operands(node: Node) -> Optional[Tuple[Node, Node, Any]]:
    """``(bias, a, b-or-weight)`` of an addmm / 2-d linear ``_addmm_activation`` can take."""
    name, args = _prim(node), _args(node)
    if name == "addmm":
        if args.get("beta", 1) != 1 or args.get("alpha", 1) != 1:
            return None
        bias, a, b = args.get("c"), args.get("a"), args.get("b")
    elif name == "linear":
        bias, a, b = args.get("bias"), args.get("a"), args.get("weight")
    else:
        return None
    metas = [tensor_meta_of(v) for v in (bias, a, b)]
    out = tensor_meta_of(node)
    if None in metas or out is None or len(out.shape) != 2:
        return None
    mb, ma, mw = metas
    if ma.ndim != 2 or mw.ndim != 2 or mb.ndim != 1 or mb.shape[0] != out.shape[1]:
        return None
    if {m.dtype for m in (mb, ma, mw, out)} != {out.dtype} or out.dtype not in _DTYPES:
        return None
    return bias, a, b


_MATRIX_OPERANDS = {"matmul": ("a", "b"), "bmm": ("a", "b"), "addmm": ("a", "b"),
                    "linear": ("a", "weight")}


def _read_only_as_gemm_operand(value: Node, depth: int = 0) -> bool:
    """Every reader of ``value`` multiplies it as a matrix, directly or through views."""
    if not value.users or depth > 8:
        return False
    for user in value.users:
        name, args = _prim(user), _args(user)
        if name in _MATRIX_OPERANDS:
            if not any(args.get(key) is value for key in _MATRIX_OPERANDS[name]) or \
                    any(v is value for k, v in args.items() if k not in _MATRIX_OPERANDS[name]):
                return False
        elif name is None or user.meta["prim"].kind != "view" or \
                not _read_only_as_gemm_operand(user, depth + 1):
            return False
    return True


def _only_read_by(values: Iterable[Node], readers: Set[Node]) -> bool:
    return all(set(v.users) <= readers for v in values)


def _rewrite(gemm: Node, view: Optional[Node], out: Node, nodes: Set[Node],
             framework: str) -> bool:
    from ..prims.matmul import addmm_gelu
    from .decompose import annotate

    bias, a, b = _gemm_operands(gemm)
    graph, made = gemm.graph, []
    with graph.inserting_before(gemm):
        if _prim(gemm) == "linear":
            b = graph.call_method("t", (b,))
            made.append(b)
        fused = graph.call_function(addmm_gelu, (bias, a, b))
        made.append(fused)
    if view is not None:
        with graph.inserting_after(fused):
            shaped = graph.call_method(view.target, (fused, _args(view)["shape"]))
        made.append(shaped)
    for new in made:
        new.meta["stack"] = gemm.meta.get("stack")
        if not annotate(new, framework):
            for undo in reversed(made):
                graph.erase_node(undo)
            return False
    fused.meta["tensor_meta"] = gemm.meta["tensor_meta"]  # eager's strides
    result = made[-1]
    result.meta["tensor_meta"] = out.meta["tensor_meta"]
    out.replace_all_uses_with(result)
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in sorted(nodes | {gemm} | ({view} if view is not None else set()),
                       key=order.__getitem__, reverse=True):
        graph.erase_node(node)
    return True


def fuse_gemm_activations(gm: Any, framework: str, devices: Tuple[str, ...] = ("cuda",)) -> int:
    """Rewrite every GEMM + tanh-GELU the module docstring describes; returns how many.
    ``devices``: the device types it applies to (tests add ``"cpu"``)."""
    if framework != "torch" or os.environ.get("TPG_CUBLASLT_GELU", "1") in ("0", ""):
        return 0
    graph = getattr(gm, "graph", gm)
    done = 0
    for out in list(graph.nodes):  # a rewrite erases only nodes before ``out``
        meta = tensor_meta_of(out)
        if _prim(out) not in ("gelu", "mul") or meta is None or \
                meta.dtype not in _DTYPES or str(meta.device).split(":")[0] not in devices:
            continue
        found = tanh_gelu_input(out)
        if found is None:
            continue
        x, nodes = found
        view = x if _prim(x) in ("view", "reshape") and x.op == "call_method" else None
        gemm = _args(view).get("a") if view is not None else x
        if not isinstance(gemm, Node) or _gemm_operands(gemm) is None:
            continue
        if not _read_only_as_gemm_operand(out) or \
                not _only_read_by([n for n in nodes if n is not out], nodes) or \
                not _only_read_by([x], nodes) or \
                (view is not None and not _only_read_by([gemm], {view})):
            continue
        done += _rewrite(gemm, view, out, nodes, framework)
    return done
