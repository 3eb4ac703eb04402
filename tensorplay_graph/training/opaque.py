"""Opaque nodes of a joint graph: ops our prims do not differentiate, kept whole.

A custom op (its ``register_autograd`` backward), a framework function with no prim
(``embedding``, ``scaled_dot_product_attention``, ``cat``) or a prim whose rule says
``OPAQUE`` (convolution, dropout in training) runs in the forward graph as ONE node,
:class:`OpaqueForward`, under the framework's own autograd: it returns a :class:`Tape`
holding the op's outputs and the framework's record of them. The backward graph has ONE
node for it, :func:`tape_backward`, which runs the framework's backward of that op alone
(``autograd.grad`` over the tape). The op runs once; nothing is recomputed.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from ..frameworks import adapter_for, framework_of, is_tensor
from ..ir.node import map_aggregate

__all__ = ["OpaqueForward", "Slot", "Tape", "tape_value", "tape_backward"]


class Slot:
    """Where the ``index``-th input of an opaque node goes in its call's arguments."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"Slot({self.index})"


class Tape:
    """An opaque op's outputs (detached, for the rest of the graph) and its autograd record."""

    __slots__ = ("value", "outputs", "leaves", "framework")

    def __init__(self, value: Any, outputs: List[Any], leaves: List[Any], framework: str) -> None:
        self.value, self.outputs, self.leaves, self.framework = value, outputs, leaves, framework


class OpaqueForward:
    """Runs one op with its gradient inputs as fresh leaves, under the framework's grad mode.

    ``template`` is the op's ``(args, kwargs)`` with :class:`Slot` markers for its graph
    inputs; ``grad_slots`` the input positions whose gradients the backward needs.
    """

    def __init__(self, op: str, target: Any, template: Tuple[tuple, dict],
                 grad_slots: Sequence[int], label: str) -> None:
        self.op, self.target, self.template = op, target, template
        self.grad_slots = tuple(grad_slots)
        self.__name__ = f"opaque_{label}"
        self.label = label

    def __call__(self, *inputs: Any) -> Tape:
        inputs = list(inputs)
        leaves = []
        framework = None
        for slot in self.grad_slots:
            value = inputs[slot]
            framework = framework or framework_of(value)
            leaf = value.detach().requires_grad_(True)
            inputs[slot] = leaf
            leaves.append(leaf)
        adapter = adapter_for(framework or "torch")
        args, kwargs = map_aggregate(self.template, lambda v: inputs[v.index]
                                     if isinstance(v, Slot) else v)
        with adapter.set_grad_enabled(True):
            if self.op == "call_method":
                out = getattr(args[0], self.target)(*args[1:], **kwargs)
            else:
                out = self.target(*args, **kwargs)
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        value = map_aggregate(out, lambda v: v.detach() if is_tensor(v) else v)
        return Tape(value, flat, leaves, framework or "torch")

    def __repr__(self) -> str:
        return f"<opaque {self.label}>"


def tape_value(tape: Tape) -> Any:
    """The op's outputs, detached (the graph's own backward carries their gradients)."""
    return tape.value


def tape_backward(tape: Tape, *grads: Optional[Any]) -> Tuple[Optional[Any], ...]:
    """Gradients of the tape's gradient inputs, given the gradients of its outputs."""
    outputs, cotangents = [], []
    for out, grad in zip(tape.outputs, grads):
        if grad is not None and is_tensor(out) and out.requires_grad:
            outputs.append(out)
            cotangents.append(grad)
    if not outputs:  # detach-like ops: eager autograd gives their inputs no gradient either
        return tuple(leaf.new_zeros(leaf.shape) for leaf in tape.leaves)
    autograd = adapter_for(tape.framework).module.autograd
    # retain_graph: the program's own autograd.Function decides when the tape is dropped
    # (it lives on its context), so a user's retain_graph=True backward can run twice.
    found = autograd.grad(outputs, tape.leaves, cotangents, retain_graph=True, allow_unused=True)
    return tuple(leaf.new_zeros(leaf.shape) if g is None else g
                 for leaf, g in zip(tape.leaves, found))
