"""Split a region into kernel groups: GEMM + epilogue, and fused pointwise runs.

A region may hold several matmuls (a whole MLP block). Walking its nodes in
order, each matmul opens a GEMM group; a pointwise node joins the open GEMM
group as an epilogue step when it reads that group's last value (and nothing
else reads that value), its other tensor operands are a column vector (N,) or
a full (M, N) tensor that exist before the group runs; anything else joins a
pointwise group. Groups run in creation order, so a group may only read
values produced outside the region or by earlier groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ...errors import LoweringError
from ...prims.lowering import Gemm
from .program import identifier, literal, numel


@dataclass
class Group:
    kind: str  # "gemm" | "pointwise" | "op"
    index: int
    nodes: List[Any] = field(default_factory=list)
    ep_inputs: List[Tuple[Any, str]] = field(default_factory=list)  # (node, "col"|"full")
    outputs: List[Any] = field(default_factory=list)

    @property
    def tail(self) -> Any:
        return self.nodes[-1]


def tensor_meta(node: Any) -> Any:
    meta = node.meta.get("tensor_meta") if hasattr(node, "meta") else None
    if meta is None or not hasattr(meta, "shape"):
        raise LoweringError(f"tilelang backend: node {getattr(node, 'name', node)!r} has no "
                            f"tensor_meta; run shape_prop before lowering")
    return meta


def is_node(value: Any) -> bool:
    return hasattr(value, "op") and hasattr(value, "meta") and hasattr(value, "users")


def tensor_args(node: Any) -> List[Any]:
    args = node.meta.get("prim_args") or {}
    return [v for v in args.values() if is_node(v)]


def prim_kind(node: Any) -> Optional[str]:
    prim = node.meta.get("prim")
    return getattr(prim, "kind", None)


def epilogue_kind(operand: Any, out_shape: Tuple[int, ...]) -> Optional[str]:
    """``"full"`` / ``"col"`` when ``operand`` can be read inside a GEMM epilogue."""
    shape = tuple(tensor_meta(operand).shape)
    if shape == tuple(out_shape):
        return "full"
    n = out_shape[-1]
    if shape and shape[-1] == n and numel(shape) == n and len(shape) <= len(out_shape):
        return "col"
    return None


def plan(region: Any) -> List[Group]:
    """The groups of ``region`` in execution order, with their outputs filled in."""
    members = set(region.nodes)
    group_of: Dict[Any, Group] = {}
    groups: List[Group] = []
    open_gemm: Optional[Group] = None
    open_pw: Optional[Group] = None

    def available_before(value: Any, group: Group) -> bool:
        return value not in members or group_of[value].index < group.index

    for node in region.nodes:
        kind = prim_kind(node)
        if kind == "matmul":
            open_gemm = Group("gemm", len(groups), [node])
            groups.append(open_gemm)
        elif kind == "pointwise":
            g = open_gemm
            fusable = (
                g is not None and g.tail in tensor_args(node) and len(g.tail.users) == 1
                and g.tail not in region.outputs
                and tuple(tensor_meta(node).shape) == tuple(tensor_meta(g.tail).shape)
            )
            extra: List[Tuple[Any, str]] = []
            if fusable:
                for operand in tensor_args(node):
                    if operand is g.tail:
                        continue
                    ek = epilogue_kind(operand, tuple(tensor_meta(g.tail).shape))
                    if ek is None or not available_before(operand, g):
                        fusable = False
                        break
                    extra.append((operand, ek))
            if fusable:
                g.nodes.append(node)
                g.ep_inputs += [e for e in extra if e[0] not in [x for x, _ in g.ep_inputs]]
                group_of[node] = g
                continue
            p = open_pw
            same_shape = p is not None and tuple(tensor_meta(node).shape) == tuple(tensor_meta(p.tail).shape)
            if not (same_shape and all(v not in members or group_of[v] is p or group_of[v].index < p.index
                                       for v in tensor_args(node))):
                open_pw = p = Group("pointwise", len(groups))
                groups.append(p)
            p.nodes.append(node)
        else:
            raise LoweringError(f"tilelang backend: node {node.name!r} (prim kind {kind!r}) cannot be "
                                f"lowered; supports() should have declined it")
        group_of[node] = groups[-1] if kind == "matmul" else group_of.get(node, open_pw)
    for g in groups:
        inside = set(g.nodes)
        g.outputs = [n for n in g.nodes if n in region.outputs or any(u not in inside for u in n.users)]
    return groups


def gemm_rule(prim: Any) -> Optional[Gemm]:
    rule = prim.lowering("tilelang")
    return rule if isinstance(rule, Gemm) else None


def gemm_dims(node: Any) -> Tuple[Optional[tuple], Optional[str]]:
    """((batch, M, N, K, trans_b), None) for a matmul-kind node, or (None, reason)."""
    prim, args = node.meta["prim"], node.meta.get("prim_args") or {}
    rule = gemm_rule(prim)
    if rule is None:
        return None, f"matmul prim {prim.name!r} has no TileLang Gemm rule in its record"
    a, b, trans_b = args.get(rule.lhs), args.get(rule.rhs), rule.rhs_transposed
    if not (is_node(a) and is_node(b)):
        return None, f"{prim.name}: operands must be tensors"
    sa, sb = tensor_meta(a).shape, tensor_meta(b).shape
    if len(sb) == 2 and len(sa) >= 2:
        K = sa[-1]
        N = sb[0] if trans_b else sb[1]
        if (sb[1] if trans_b else sb[0]) != K:
            return None, f"{prim.name}: inner sizes differ ({sa} x {sb})"
        return (0, numel(sa[:-1]), N, K, trans_b), None
    if len(sa) == 3 and len(sb) == 3 and sa[0] == sb[0] and not trans_b:
        return (sa[0], sa[1], sb[2], sa[2], False), None
    return None, f"{prim.name}: operand shapes {sa} x {sb} are not a 2-d or batched GEMM"


def render_args(node: Any, names: Dict[Any, str]) -> Dict[str, Any]:
    """Canonical args with tensors replaced by loop-value names and constants checked."""
    out = {}
    for key, value in (node.meta.get("prim_args") or {}).items():
        if is_node(value):
            out[key] = f"{names[value]}_v"
        elif isinstance(value, float) and not math.isfinite(value) and not math.isnan(value):
            from .exprs import scalar_text  # +-inf as a TIR expression (NaN is declined)
            out[key] = scalar_text(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            literal(value)  # raises on nan
            out[key] = value
        else:
            out[key] = value
    return out


def value_names(nodes: List[Any]) -> Dict[Any, str]:
    names: Dict[Any, str] = {}
    for n in nodes:
        names[n] = identifier(n.name)
    if len(set(names.values())) != len(names):
        raise LoweringError(f"tilelang backend: node names {sorted(n.name for n in nodes)} collide "
                            f"after sanitising; rename the nodes")
    return names


def absorbs(backend: Any, producer: Any, node: Any) -> bool:
    """Whether ``node`` fuses into the GEMM epilogue ending at ``producer`` (the rule of
    :func:`plan`): ``producer`` is a matmul or already in such an epilogue, ``node`` is its
    only reader and a pointwise op of the same shape that ``backend`` supports, and its other
    tensor operands are (N,) columns or full (M, N) tensors."""
    if prim_kind(node) != "pointwise" or len(producer.users) != 1:
        return False
    if prim_kind(producer) != "matmul" and "epilogue_of" not in producer.meta:
        return False
    try:
        shape = tuple(tensor_meta(producer).shape)
        if tuple(tensor_meta(node).shape) != shape:
            return False
        if any(epilogue_kind(v, shape) is None for v in tensor_args(node) if v is not producer):
            return False
    except LoweringError:
        return False
    return backend.supports(node) is None
