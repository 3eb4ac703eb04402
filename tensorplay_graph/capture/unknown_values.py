"""Example values that are not the program's values, and what capture may read from them.

Three kinds of node carry an example with the right metadata but made-up values: a
custom op's output (its ``register_fake`` returns ``empty_like``: whatever memory holds),
the inputs a custom op declares it mutates (the fake writes nothing), and a random draw
(zeros; ``capture.randomness``). Values computed from them are made up too. Metadata
derived from such values is wrong: ``x[fake > 0]`` has as many rows as the garbage has
positive entries, and the next op on it raised a size mismatch during capture although
eager runs the program (seed 20002147).

So an op that reads a made-up value gets no example (its metadata is learned on the
compiled program's first call, as for a custom op without a fake) when its result's shape
depends on the values (:func:`shape_reads_values`), or when computing the example fails
(an index out of range in the garbage). Its result is made-up too.
"""

from __future__ import annotations

import operator
from typing import Any, Set

from ..frameworks import is_tensor

__all__ = ["UnknownValues", "shape_reads_values"]

#: Ops (function or method names) whose result's shape depends on the input's values.
_VALUE_SHAPED = frozenset({
    "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount",
    "repeat_interleave", "nonzero_static", "histogram", "histogramdd",
})


def _is_custom_op(target: Any) -> bool:
    return all(hasattr(target, a) for a in ("mutates_args", "is_triton_op", "is_tile_lang_op")) \
        or type(target).__module__ == "tensorplay.library"


def _has_mask(index: Any) -> bool:
    """An index holding a bool tensor (a mask selects data-dependent many elements)."""
    if isinstance(index, (tuple, list)):
        return any(_has_mask(item) for item in index)
    return is_tensor(index) and "bool" in str(index.dtype).lower()


def shape_reads_values(kind: str, target: Any, example_args: tuple) -> bool:
    """Whether the result's shape of ``target(*example_args)`` depends on tensor values."""
    name = target if kind == "call_method" else getattr(target, "__name__", "")
    if name in _VALUE_SHAPED:
        return True
    if target is operator.getitem or name in ("__getitem__", "index"):
        return len(example_args) > 1 and _has_mask(example_args[1:])
    if name == "where":
        return len(example_args) == 1  # where(cond): the indices of the true entries
    return False


class UnknownValues:
    """The nodes of one trace whose example values are made up (module docstring)."""

    def __init__(self) -> None:
        self.nodes: Set[Any] = set()

    def reads(self, node: Any) -> bool:
        """Whether ``node`` reads a made-up value."""
        nodes = self.nodes
        return bool(nodes) and any(n in nodes for n in node.all_input_nodes)

    def mark(self, node: Any, inplace: bool) -> None:
        """``node``'s value is made up (and so is the tensor it writes in place)."""
        self.nodes.add(node)
        if inplace and node.args and hasattr(node.args[0], "all_input_nodes"):
            self.nodes.add(node.args[0])

    def mark_custom_op(self, node: Any) -> bool:
        """Mark a custom op's output and the inputs it may write; False for other nodes."""
        if node.op != "call_function" or not _is_custom_op(node.target):
            return False
        self.nodes.add(node)
        if getattr(node.target, "mutates_args", ()):  # names, or "unknown": all inputs
            self.nodes.update(node.all_input_nodes)
        return True
