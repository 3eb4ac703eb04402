"""A GEMM's bias + tanh-GELU moved into cuBLASLt's epilogue (part of ``decompose``).

GPT-2's MLP is ``gelu_new(addmm(bias, x, W))``: cuBLAS writes the product, and a second kernel
reads it back for the activation. ``torch._addmm_activation(bias, x, W, use_gelu=True)`` runs
the bias and the tanh-GELU in the GEMM's epilogue instead (H200, 4096 x 768 @ 3072 bf16,
``benchmarks/gemm_variants_gpu.py``: 0.038 ms against 0.050 for ``addmm`` + the activation).

The rewrite takes ``addmm(c, a, b)`` (``beta = alpha = 1``, ``c`` a 1-d bias of N) or a 2-d
``linear(a, w, bias)``, optionally one ``view`` / ``reshape`` of its result, and the tanh-GELU
of that: the ``gelu`` prim with ``approximate="tanh"`` or the formula models spell out,
``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))`` in any association of its
products and sums. Every value in between must be read only by the pattern, and the
activation only by GEMMs (through views): cuBLASLt's GELU gives +0.0 where eager's formula
gives -0.0 (a pre-activation below about -10 in bfloat16: ``x * 0.5 * (1 + tanh(..)) = x * 0``),
and a product never shows that sign (its sum starts from +0.0). Only torch CUDA float16 /
bfloat16 programs change (``TPG_CUBLASLT_GELU=0`` turns the rewrite off). The values differ
from eager's only in rounding: eager rounds the product and each step of the formula to the
dtype, the epilogue rounds once.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from ..ir.meta import TensorMeta
from ..ir.node import Node

__all__ = ["fuse_gemm_activations", "tanh_gelu_input"]

_DTYPES = frozenset({"float16", "bfloat16"})
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715
_REL_TOL = 1e-7

Poly = Dict[int, float]  # power of x -> coefficient


def _prim(node: Any) -> Optional[str]:
    prim = node.meta.get("prim") if isinstance(node, Node) else None
    return None if prim is None else prim.name


def _args(node: Node) -> Dict[str, Any]:
    return node.meta.get("prim_args") or {}


def _scalar(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for i, a in p.items():
        for j, b in q.items():
            out[i + j] = out.get(i + j, 0.0) + a * b
    return out


def _add(p: Poly, q: Poly, scale: float = 1.0) -> Poly:
    out = dict(p)
    for i, b in q.items():
        out[i] = out.get(i, 0.0) + scale * b
    return out


def _poly(value: Any, x: Node, seen: Set[Node], depth: int = 0) -> Optional[Poly]:
    """``value`` as a polynomial in ``x`` (adds, muls, integer powers, scalars), recording
    the nodes it passes in ``seen``; None when it is anything else."""
    c = _scalar(value)
    if c is not None:
        return {0: c}
    if value is x:
        return {1: 1.0}
    name = _prim(value)
    if name is None or depth > 16:
        return None
    args = _args(value)
    if name in ("add", "sub"):
        alpha = _scalar(args.get("alpha", 1))
        p, q = _poly(args.get("a"), x, seen, depth + 1), _poly(args.get("b"), x, seen, depth + 1)
        if p is None or q is None or alpha is None:
            return None
        out = _add(p, q, alpha if name == "add" else -alpha)
    elif name == "mul":
        p, q = _poly(args.get("a"), x, seen, depth + 1), _poly(args.get("b"), x, seen, depth + 1)
        if p is None or q is None:
            return None
        out = _mul(p, q)
    elif name == "pow":
        e = _scalar(args.get("b"))
        p = _poly(args.get("a"), x, seen, depth + 1)
        if p is None or e is None or e != int(e) or not 1 <= e <= 3:
            return None
        out = p
        for _ in range(int(e) - 1):
            out = _mul(out, p)
    elif name == "neg":
        p = _poly(args.get("a"), x, seen, depth + 1)
        if p is None:
            return None
        out = {i: -a for i, a in p.items()}
    else:
        return None
    seen.add(value)
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL_TOL * abs(b)


def _is(p: Optional[Poly], expected: Poly) -> bool:
    if p is None:
        return False
    powers = {i for i, a in p.items() if a != 0.0} | set(expected)
    return all(_close(p.get(i, 0.0), expected.get(i, 0.0)) for i in powers)


def _factors(value: Any, seen: Set[Node], out: List[Any]) -> float:
    """Flatten a product tree into its non-scalar factors (``out``); returns the scalar part."""
    c = _scalar(value)
    if c is not None:
        return c
    if _prim(value) == "mul":
        args = _args(value)
        seen.add(value)
        return _factors(args.get("a"), seen, out) * _factors(args.get("b"), seen, out)
    out.append(value)
    return 1.0


def _one_plus_tanh(value: Any, seen: Set[Node]) -> Optional[Node]:
    """``T`` when ``value`` is ``1 + tanh(T)`` (either order), else None."""
    if _prim(value) != "add" or _scalar(_args(value).get("alpha", 1)) != 1.0:
        return None
    a, b = _args(value).get("a"), _args(value).get("b")
    if _scalar(a) == 1.0 and _prim(b) == "tanh":
        th = b
    elif _scalar(b) == 1.0 and _prim(a) == "tanh":
        th = a
    else:
        return None
    seen.update((value, th))
    return _args(th).get("a")


def tanh_gelu_input(out: Node) -> Optional[Tuple[Node, Set[Node]]]:
    """``(x, nodes)`` when ``out`` computes the tanh-GELU of ``x``; ``nodes``: the pattern's
    nodes from ``out`` back to (not including) ``x``. None otherwise."""
    name = _prim(out)
    if name == "gelu":
        x = _args(out).get("a")
        return (x, {out}) if _args(out).get("approximate") == "tanh" and isinstance(x, Node) \
            else None
    if name != "mul":
        return None
    seen: Set[Node] = set()
    factors: List[Any] = []
    scale = _factors(out, seen, factors)
    if len(factors) != 2 or not _close(scale, 0.5):
        return None
    for x, other in (factors, factors[::-1]):
        inner_seen: Set[Node] = set()
        inner = _one_plus_tanh(other, inner_seen)
        if inner is None or not isinstance(x, Node):
            continue
        if _is(_poly(inner, x, inner_seen), {1: _SQRT_2_OVER_PI, 3: _SQRT_2_OVER_PI * _CUBIC}):
            return x, seen | inner_seen
    return None


def _tensor_meta(value: Any) -> Optional[TensorMeta]:
    meta = value.meta.get("tensor_meta") if isinstance(value, Node) else None
    return meta if isinstance(meta, TensorMeta) else None


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
    metas = [_tensor_meta(v) for v in (bias, a, b)]
    out = _tensor_meta(node)
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
            shaped = graph.call_method(view.target if view.op == "call_method" else "view",
                                       (fused, _args(view)["shape"]))
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
    for out in list(graph.nodes):
        if out.graph is not graph or _prim(out) not in ("gelu", "mul"):
            continue
        found = tanh_gelu_input(out)
        if found is None:
            continue
        x, nodes = found
        view = x if _prim(x) in ("view", "reshape") and x.op == "call_method" else None
        gemm = _args(view).get("a") if view is not None else x
        meta = _tensor_meta(out)
        if not isinstance(gemm, Node) or _gemm_operands(gemm) is None or meta is None or \
                str(meta.device).split(":")[0] not in devices:
            continue
        if not _read_only_as_gemm_operand(out) or \
                not _only_read_by([n for n in nodes if n is not out], nodes) or \
                not _only_read_by([x], nodes) or \
                (view is not None and not _only_read_by([gemm], {view})):
            continue
        done += _rewrite(gemm, view, out, nodes, framework)
    return done
