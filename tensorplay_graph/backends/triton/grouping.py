"""Grouping a region's nodes into kernels (Triton backend).

Nodes are taken in graph order. A pointwise node joins the current kernel when it has the
kernel's shape; a reduction or norm turns a pointwise kernel over its input shape into a rows
kernel (the pointwise work before it is fused into the row loop), and later pointwise nodes
over the full shape or the per-row shape join it too (normalise, activate, scale, cast).
Anything else starts a new kernel; values crossing kernels are materialised. Two placements
keep values from crossing kernels needlessly: a view or gather of the region's inputs runs
before every kernel (it constrains no reader's placement), and a pointwise node of the
region's inputs with one reader of its shape is computed in that reader's kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .layout import broadcast_strides
from .operands import is_node, node_meta


@dataclass
class Group:
    kind: str                       # "pointwise" | "rows"
    shape: Tuple[int, ...]
    dims: Optional[Tuple[int, ...]] = None
    nodes: List[Any] = field(default_factory=list)

    def reduced(self, keep: bool) -> Tuple[int, ...]:
        return tuple(1 if d in self.dims else s for d, s in enumerate(self.shape) if keep or d not in self.dims)

    def per_row(self, shape: Tuple[int, ...]) -> bool:
        return self.kind == "rows" and shape != self.shape


def row_dims(node: Any, in_shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """Dims a reduction / norm node reduces over, in its input's shape (the record's rule)."""
    return node.meta["prim"].reduced_dims(len(in_shape), node.meta["prim_args"])


def _operand_shape(value: Any) -> Optional[Tuple[int, ...]]:
    return tuple(node_meta(value).shape) if is_node(value) else None


def group_nodes(nodes: List[Any]) -> List[Group]:
    """Split ``nodes`` (graph order) into kernels; see the module docstring."""
    groups: List[Group] = []
    owner: Dict[Any, Group] = {}
    front: List[int] = []        # ids of the groups that read only the region's inputs
    members = set(nodes)
    deferred: set = set()

    def level(value: Any) -> int:
        """The first group a reader of ``value`` may join."""
        if value in owner:
            return groups.index(owner[value])
        if value in deferred:
            return max((level(v) for v in value.all_input_nodes), default=0)
        return 0

    for node in nodes:
        prim = node.meta["prim"]
        shape = tuple(node_meta(node).shape)
        if _deferrable(node, members, owner, front, deferred):
            deferred.add(node)
            continue
        # The node may join any group from the last one producing one of its operands on.
        first = max([level(v) for v in node.all_input_nodes], default=0)
        target = None
        if prim.kind in ("view", "gather"):  # a copy of its own (indexed_region.py)
            target = Group("indexed", shape, None, [])
            if all(v not in owner or id(owner[v]) in front for v in node.all_input_nodes) \
                    and not any(v in deferred for v in node.all_input_nodes):
                # reads only the region's inputs: runs before every kernel, so that it
                # orders no reader after the kernels already planned
                groups.insert(len(front), target)
                front.append(id(target))
            else:
                groups.append(target)
        elif prim.kind == "pointwise":
            for group in reversed(groups[first:]):
                if _joins_pointwise(group, node, shape, owner):
                    target = group
                    break
            if target is None:
                target = Group("pointwise", shape, None, [])
                groups.append(target)
        else:
            in_shape = _operand_shape(node.meta["prim_args"]["a"])
            dims = row_dims(node, in_shape)
            for group in reversed(groups[first:]):
                if group.kind != "indexed" and group.shape == in_shape and \
                        (group.kind == "pointwise" or group.dims == dims) and \
                        _reads_rows(group.nodes + [node], in_shape, dims):
                    target = group
                    break
            if target is None:
                target = Group("rows", in_shape, dims, [])
                groups.append(target)
            target.kind, target.dims = "rows", dims
        for value in _pending(node, deferred):
            deferred.discard(value)
            home = target
            if not _joins_pointwise(target, value, tuple(node_meta(value).shape), owner):
                # computed by a kernel of its own, right before its reader's
                home = Group("pointwise", tuple(node_meta(value).shape), None, [])
                groups.insert(groups.index(target), home)
            home.nodes.append(value)
            owner[value] = home
        target.nodes.append(node)
        owner[node] = target
    return groups


def _deferrable(node: Any, members: set, owner: Dict[Any, Group], front: List[int],
                deferred: set) -> bool:
    """A pointwise node of its only reader's shape that reads only the region's inputs: it
    is placed with that reader, in the reader's kernel, instead of in an earlier kernel that
    would write it out (GPT-2's loss casts its 16-bit logits once per reduction pass: placed
    in the first pass's kernel, the float32 logits were written for the second)."""
    if node.meta["prim"].kind != "pointwise" or len(node.users) != 1:
        return False
    (user,) = node.users
    kind = user.meta["prim"].kind if user in members else None
    if kind is None or kind in ("view", "gather"):
        return False
    reads = tuple(node_meta(user).shape) if kind == "pointwise" else \
        _operand_shape(user.meta["prim_args"].get("a"))
    if reads != tuple(node_meta(node).shape):
        return False
    return all(v in deferred or v not in members or (v in owner and id(owner[v]) in front)
               for v in node.all_input_nodes)


def _pending(node: Any, deferred: set) -> List[Any]:
    """The deferred nodes ``node`` reads, directly or through each other, operands first."""
    found: List[Any] = []

    def visit(value: Any) -> None:
        for v in value.all_input_nodes:
            if v in deferred and v not in found:
                visit(v)
                found.append(v)
    visit(node)
    return found


def _reads_rows(nodes: List[Any], shape: Tuple[int, ...], dims: Tuple[int, ...]) -> bool:
    """Whether every full-shape operand the kernel of ``nodes`` would load walks the reduced
    ``dims`` as one run in memory (what ``RowsSpace`` needs). A transposed operand (an
    outer-product einsum's output, seed 6000208) fails it: the reduction then reads the
    pointwise result, materialized by its own kernel, instead of fusing."""
    members = set(nodes)
    live = sorted(d % len(shape) for d in dims if shape[d] != 1)
    for node in nodes:
        full = tuple(node_meta(node).shape) == tuple(shape)
        for value in node.all_input_nodes:
            # a full node broadcasts its operands (x0 of (5,) against (5, 5): strides (0, 1),
            # seed 6001319); a reduction reads its full operand; per-row values are not rows
            if value in members or not (full or tuple(node_meta(value).shape) == tuple(shape)):
                continue
            stride = broadcast_strides(node_meta(value).shape, node_meta(value).stride, shape)
            if any(stride[a] != stride[b] * shape[b] for a, b in zip(live, live[1:])):
                return False
    return True


def _joins_pointwise(group: Group, node: Any, shape, owner: Dict[Any, Group]) -> bool:
    if group.kind == "indexed":
        return False
    if group.kind == "pointwise":
        return shape == group.shape
    full = shape == group.shape
    if not full and shape not in (group.reduced(True), group.reduced(False)):
        return False
    if full and not _reads_rows(group.nodes + [node], group.shape, group.dims):
        return False
    if full:
        # A full-shape node may not read an in-group per-row value whose reduced dims were
        # dropped: eager broadcasting aligns it with the trailing dims, not per row.
        for value in node.meta["prim_args"].values():
            if is_node(value) and owner.get(value) is group:
                if len(node_meta(value).shape) < len(group.shape):
                    return False
    return True
