"""Example values that are not the program's values, and what capture may read from them.

Three kinds of node carry an example with the right metadata but made-up values: a
custom op's output (its ``register_fake`` returns ``empty_like``: whatever memory holds),
the inputs a custom op declares it mutates (the fake writes nothing), and a random draw
(zeros; ``capture.randomness``). Values computed from them are made up too. Metadata
derived from such values is wrong: ``x[fake > 0]`` has as many rows as the garbage has
positive entries, and the next op on it raised a size mismatch during capture although
eager runs the program (seed 20002147).

So an op whose result's shape depends on made-up values (:func:`shape_deciders`:
``x[fake > 0]``, but not ``fake[real_mask]``), or whose example fails on them (an index
out of range in the garbage), gets no example: its metadata is learned on the compiled
program's first call, as for a custom op without a fake. Its result is made up too, and
Python may not read its shape (a TensorPlay program then runs eagerly).
"""

from __future__ import annotations

import operator
from typing import Any, List, Optional, Set

from ..frameworks import is_tensor
from ..ir.node import map_arg, op_name

__all__ = ["VALUE_SHAPED", "UnknownValues", "shape_deciders"]

#: Ops (function or method names) whose result's shape may depend on the input's values
#: (``repeat_interleave`` only with a tensor of counts: :func:`value_shape_inputs`).
#: ``histogram`` is not one: its shape follows ``bins`` (a count, or the edges' length).
VALUE_SHAPED = frozenset({
    "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount",
    "repeat_interleave", "nonzero_static",
})


def _is_custom_op(target: Any) -> bool:
    return all(hasattr(target, a) for a in ("mutates_args", "is_triton_op", "is_tile_lang_op")) \
        or type(target).__module__ == "tensorplay.library"


def _has_mask(index: Any) -> bool:
    """An index holding a bool tensor (a mask selects data-dependent many elements)."""
    if isinstance(index, (tuple, list)):
        return any(_has_mask(item) for item in index)
    return is_tensor(index) and "bool" in str(index.dtype).lower()


def _nodes(value: Any) -> List[Any]:
    found: List[Any] = []
    map_arg(value, found.append)
    return found


def _repeat_counts(node: Any) -> Any:
    """``repeat_interleave``'s counts: ``repeats=`` / the second argument, else (the one-argument
    form ``repeat_interleave(counts)``) the first."""
    args, kwargs = node.args, node.kwargs
    repeats = kwargs.get("repeats", args[1] if len(args) > 1 else None)
    return args[0] if repeats is None and args else repeats


def value_shape_inputs(node: Any) -> Optional[list]:
    """The input nodes whose values decide the shape of a call to a ``VALUE_SHAPED`` op or of
    ``where(cond)``, or None when that shape is static: ``x.repeat_interleave(3)`` (an int count,
    or ``output_size=`` given) is a plain op, and marking it value-shaped cost a fake's readers
    their examples, so ``x.cummin(-1).indices`` on it became a method (seed 60013227)."""
    name = op_name(node)
    if name == "where":  # where(cond): the indices of the true entries
        return list(node.all_input_nodes) if len(node.args) + len(node.kwargs) == 1 else None
    if name not in VALUE_SHAPED:
        return None
    if name == "repeat_interleave":
        if node.kwargs.get("output_size") is not None:
            return None
        return _nodes(_repeat_counts(node)) or None
    return list(node.all_input_nodes)


def shape_deciders(node: Any, kind: str, target: Any, example_args: tuple) -> Optional[list]:
    """The input nodes whose values decide the shape of ``node``'s result (``x[mask]``: the
    mask's), or None when its shape does not depend on tensor values."""
    name = target if kind == "call_method" else getattr(target, "__name__", "")
    deciders = value_shape_inputs(node)
    if deciders is not None:
        return deciders
    if (target is operator.getitem or name in ("__getitem__", "index")) and \
            len(example_args) > 1 and _has_mask(example_args[1:]):
        return _nodes(node.args[1:])
    return None


class UnknownValues:
    """Per trace: nodes whose example values are made up (``nodes``), and nodes whose shape
    holds only for this call's data or is not known (``varying``: ``x[mask]``, what is
    computed from it, ops whose example made-up values could not give). Python may not
    read a ``varying`` shape (``proxy.varying_shape``)."""

    def __init__(self) -> None:
        self.nodes: Set[Any] = set()
        self.varying: Set[Any] = set()

    def reads(self, node: Any) -> bool:
        """Whether ``node`` reads a made-up value."""
        nodes = self.nodes
        return bool(nodes) and any(n in nodes for n in node.all_input_nodes)

    def shape_from_made_up(self, node: Any, kind: str, target: Any, example_args: tuple) -> bool:
        """Note a data-dependent shape; True when made-up values would decide it (the node
        then gets no example)."""
        deciders = shape_deciders(node, kind, target, example_args)
        if deciders is None:
            return False
        self.varying.add(node)
        if any(n in self.nodes for n in deciders):
            self.nodes.add(node)
            return True
        return False

    def note(self, node: Any, example: Any) -> None:
        """After ``node``'s example: a result computed from a varying shape varies too
        (unless it is 0-d); an unknown example is treated as varying."""
        varying = self.varying
        if varying and any(n in varying for n in node.all_input_nodes) and \
                getattr(example, "shape", None) != ():
            varying.add(node)

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
