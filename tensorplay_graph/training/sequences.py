"""Sequence values read whole, rewritten into element reads before the backward is built.

A ``chunk`` / ``split`` / ``unbind`` result is one node whose value is a sequence of
tensors. The joint builder follows gradients through its elements (``pieces[i]``), but a
program may also hand the whole sequence, or a slice of it, to another op:
``T.cat(x.chunk(2, 0)[::-1], 0)``, ``T.stack(x.chunk(3)[1:])`` (seed 20011942). Such an
argument becomes the list of its element reads (``[pieces[1], pieces[0]]``): the same
values for the op, and every gradient then reaches ``pieces`` through elements. A slice
read by element (``x.chunk(3)[1:][0]``) reads the original element instead.

A program that returns a sequence value as is keeps eager autograd (``NeedsEager``): its
outputs must be the sequence object eager returns, with grad on every element.
"""

from __future__ import annotations

import operator
from typing import Any, List, Optional, Sequence

from ..ir.meta import TensorMeta
from ..ir.node import Node, map_arg

__all__ = ["is_sequence", "returned_sequences", "unpack_sequences"]


def is_sequence(node: Any) -> bool:
    """A node whose value is a sequence of tensors (its meta is a tuple of metas)."""
    return isinstance(node, Node) and isinstance(node.meta.get("tensor_meta"), tuple)


def _sliced(node: Node) -> Optional[tuple]:
    """``(base, positions)`` when ``node`` is ``base[a:b:c]`` of a sequence ``base``."""
    if node.op == "call_function" and node.target is operator.getitem and \
            len(node.args) == 2 and isinstance(node.args[1], slice) and is_sequence(node.args[0]):
        base = node.args[0]
        return base, list(range(len(base.meta["tensor_meta"])))[node.args[1]]
    return None


def _element_source(node: Node, index: int) -> tuple:
    """``(base, i)``: element ``index`` of ``node`` is element ``i`` of a sequence that is
    not itself a slice (slices of slices followed to the end)."""
    while True:
        found = _sliced(node)
        if found is None:
            return node, index % len(node.meta["tensor_meta"])
        node, positions = found
        index = positions[index]


def _element(graph: Any, node: Node, index: int, before: Node) -> Node:
    base, i = _element_source(node, index)
    with graph.inserting_before(before):
        read = graph.call_function(operator.getitem, (base, i))
    meta = base.meta["tensor_meta"][i]
    if isinstance(meta, TensorMeta):
        read.meta["tensor_meta"] = meta
    return read


def _elements(graph: Any, node: Node, before: Node) -> List[Node]:
    return [_element(graph, node, i, before) for i in range(len(node.meta["tensor_meta"]))]


def unpack_sequences(graph: Any) -> None:
    """Rewrite whole reads of sequence values into lists of element reads (module doc)."""
    for node in list(graph.nodes):
        if node.op not in ("call_function", "call_method") or _sliced(node) is not None:
            continue
        if node.target is operator.getitem and len(node.args) == 2 and \
                isinstance(node.args[1], int) and is_sequence(node.args[0]):
            base, index = node.args
            if _sliced(base) is not None and -len(base.meta["tensor_meta"]) <= index < \
                    len(base.meta["tensor_meta"]):
                node.args = _element_source(base, index)
            continue
        if node.target is getattr or not any(is_sequence(n) for n in node.all_input_nodes):
            continue  # ``x.max(dim).values`` reads an element by name
        made: dict = {}

        def unpack(arg: Node, node: Node = node, made: dict = made) -> Any:
            if not is_sequence(arg):
                return arg
            if arg not in made:
                made[arg] = _elements(graph, arg, node)
            return list(made[arg])
        node.args = map_arg(node.args, unpack)
        node.kwargs = map_arg(node.kwargs, unpack)
    for node in reversed(list(graph.nodes)):  # slices nothing reads any more
        if not node.users and _sliced(node) is not None:
            graph.erase_node(node)


def returned_sequences(leaves: Sequence[Node]) -> List[Node]:
    """The output leaves whose value is a sequence (eager returns them as one object)."""
    return [leaf for leaf in leaves if is_sequence(leaf)]
