"""Values whose shape depends on tensor data, and the nodes that read them.

``x[mask]``, ``nonzero`` and ``unique`` have as many rows as the data says: the metadata a
graph records for them (and for everything computed from them) holds for the call it was
recorded on, not for the next call with the same input signature. A kernel planned on
those shapes reads or writes the wrong number of elements on the next call (a Triton
region after ``x[x > 0]`` raised "shape (3,) does not broadcast to (2,)" on a call with
one more positive entry). ``barriers`` keeps every node that reads such a value out of
regions: it runs eagerly, on the real shapes, every call.
"""

from __future__ import annotations

import operator
from typing import Any, Dict

from ..ir.meta import TensorMeta
from ..ir.node import Node, op_name

__all__ = ["data_shape_readers", "shape_from_data"]


def _is_mask(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return any(_is_mask(item) for item in value)
    meta = value.meta.get("tensor_meta") if isinstance(value, Node) else None
    return isinstance(meta, TensorMeta) and meta.dtype in ("bool", "uint8")


def shape_from_data(node: Node) -> bool:
    """Whether ``node``'s own result has a shape that depends on its inputs' values."""
    if node.op not in ("call_function", "call_method"):
        return False
    prim = node.meta.get("prim")
    if prim is not None and prim.data_dependent and \
            prim.flags_apply(node.meta.get("prim_args", {})):
        return True
    name = op_name(node)
    if node.target is operator.getitem or name in ("__getitem__", "index"):
        return len(node.args) > 1 and _is_mask(node.args[1:])
    from ..capture.unknown_values import value_shape_inputs
    return value_shape_inputs(node) is not None


def _fixed(node: Node) -> bool:
    """A 0-d result: its shape cannot vary, whatever its inputs' shapes."""
    meta = node.meta.get("tensor_meta")
    return isinstance(meta, TensorMeta) and not meta.shape


def data_shape_readers(graph: Any) -> Dict[Node, Node]:
    """Each node that reads a value whose shape depends on data -> the node it comes from."""
    origin: Dict[Node, Node] = {}  # value with a data-dependent shape -> its source
    readers: Dict[Node, Node] = {}
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        source = next((origin[n] for n in node.all_input_nodes if n in origin), None)
        if source is not None:
            readers[node] = source
            if not _fixed(node):
                origin[node] = source
        elif shape_from_data(node):
            origin[node] = node
    return readers
