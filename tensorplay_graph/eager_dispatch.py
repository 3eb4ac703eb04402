"""The program that runs a captured graph through eager dispatch (``"auto"`` on the CPU).

Same ops, cheaper bindings. A TensorPlay tensor's Python operator with a Python
scalar operand (``x * 1.5``) costs about 0.6 us more per call than the method bound
to the same native op (``x.mul(1.5)``: 3.0 vs 2.4 us on 32x256 float32, min of many
short samples; with a tensor operand the method is ~0.5 us slower, so those stay
operators). A chain of small ops pays that on every op, about what the compiled
function's whole per-call check costs, so the copy of the graph that runs calls the
methods instead. Only ``tensor OP scalar`` nodes are rewritten (the capture recorded
the left operand as a tensor), and only operators whose method gives the operator's
result for every dtype and scalar kind (``tests/test_eager_dispatch.py`` checks them
against eager). torch's operators cost what its methods cost: torch graphs run as
captured.

When no value can need grad (no input or constant requires it, or grad mode is
off) a second copy also reuses dead buffers, as Inductor does: an elementwise op
whose operand is an intermediate that no later node reads, of the result's shape,
dtype and strides, writes its result into that operand (``z.sub_(m)`` for
``z - m``), skipping an allocation. Only intermediates made by ops that always
return fresh memory qualify, and only when every reader of them is such an op (no
view of them exists). Which ops reuse is what was measured to pay
(``benchmarks/inplace_reuse.py``; see ``_tensorplay_reuse_pays``): every torch
elementwise op at every size, and TensorPlay's only for some ops and sizes.

>>> run = eager_program(captured_gm, "tensorplay")        # doctest: +SKIP
>>> "x.mul(1.5)" in run.code                               # doctest: +SKIP
True
"""

from __future__ import annotations

import operator
from typing import Any, Dict, Optional

from .ir.meta import TensorMeta

#: ``operator`` function -> the TensorPlay method computing the same op.
TENSORPLAY_METHODS = {
    operator.mul: "mul", operator.add: "add", operator.sub: "sub", operator.truediv: "div",
    operator.pow: "pow",
    operator.eq: "eq", operator.ne: "ne", operator.lt: "lt", operator.le: "le",
    operator.gt: "gt", operator.ge: "ge",
    operator.and_: "bitwise_and", operator.or_: "bitwise_or",
}


def eager_program(gm: Any, framework: Optional[str]) -> Any:
    """``gm`` itself, or a copy of it calling cheaper bindings of the same ops."""
    if framework != "tensorplay":
        return gm
    rewrites = [node for node in gm.graph.nodes if _method_for(node) is not None]
    if not rewrites:
        return gm
    from .compiler import copy_graph_module
    copy = copy_graph_module(gm)
    for node in copy.graph.nodes:
        method = _method_for(node)
        if method is not None:
            node.op, node.target = "call_method", method
    return copy


#: Elementwise ops -> their in-place method (operators: only with the operand first
#: unless commutative).
_INPLACE_OPERATORS = {operator.mul: "mul_", operator.add: "add_", operator.sub: "sub_",
                      operator.truediv: "div_"}
_COMMUTATIVE = (operator.mul, operator.add)
_INPLACE_METHODS = frozenset((
    "abs", "add", "clamp", "cos", "div", "exp", "expm1", "log", "log1p", "mul", "neg",
    "pow", "reciprocal", "relu", "rsqrt", "sigmoid", "sin", "sqrt", "sub", "tanh"))
#: Methods that always return a new tensor (never a view or the input itself).
_FRESH_METHODS = _INPLACE_METHODS | frozenset((
    "amax", "amin", "matmul", "mean", "prod", "softmax", "log_softmax", "std", "sum", "var"))
_FRESH_OPERATORS = frozenset(_INPLACE_OPERATORS) | {operator.matmul, operator.pow}


def no_grad_program(gm: Any, framework: Optional[str]) -> Any:
    """The program to run when no value needs grad: ``gm`` with dead buffers reused
    (``gm`` itself when nothing qualifies)."""
    if framework not in ("torch", "tensorplay"):
        return gm
    order = {node: i for i, node in enumerate(gm.graph.nodes)}
    plan = [(node, _reuse_for(node, order, framework)) for node in gm.graph.nodes]
    if not any(operand is not None for _, operand in plan):
        return gm
    from .compiler import copy_graph_module
    copy = copy_graph_module(gm)
    for (node, operand), new in zip(plan, copy.graph.nodes):
        if operand is None:
            continue
        position = node.args.index(operand)
        args = list(new.args)
        args.insert(0, args.pop(position))
        method = _INPLACE_OPERATORS.get(node.target) if node.op == "call_function" \
            else node.target + "_"
        new.op, new.target, new.args = "call_method", method, tuple(args)
    return copy


def _reuse_for(node: Any, order: Dict[Any, int], framework: str) -> Any:
    """The operand ``node`` may write its result into, or None."""
    if node.op == "call_method" and node.target in _INPLACE_METHODS:
        candidates = node.args[:1]
    elif node.op == "call_function" and _hashable(node.target) and \
            node.target in _INPLACE_OPERATORS and len(node.args) == 2 and not node.kwargs:
        candidates = node.args if node.target in _COMMUTATIVE else node.args[:1]
    else:
        return None
    out = node.meta.get("tensor_meta")
    if not isinstance(out, TensorMeta) or out.requires_grad:
        return None
    for operand in candidates:
        if _dead_fresh_buffer(operand, node, out, order) and node.args.count(operand) == 1 \
                and (framework == "torch" or _tensorplay_reuse_pays(node, operand, out)):
            return operand
    return None


#: Bytes from which TensorPlay's in-place tensor-tensor ops beat their out-of-place
#: twins: same-shape ``add_`` / ``sub_`` / ``mul_``, and ``mul_`` by a broadcast operand.
TENSORPLAY_SAME_SHAPE_BYTES = 512 * 1024
TENSORPLAY_BROADCAST_BYTES = 1024 * 1024


def _tensorplay_reuse_pays(node: Any, operand: Any, out: TensorMeta) -> bool:
    """Whether TensorPlay's in-place twin of ``node`` writing into ``operand`` was measured
    faster than ``node`` (``benchmarks/inplace_reuse.py``: in-place / out-of-place per call,
    min of many samples, 1 and 2 threads, float32, 8K-1M elements; benchmarks/RESULTS.md).
    torch's in-place ops pay at every size (0.6-1.0x up to 192K elements, 0.01-0.9x from
    1 MiB, where eager's fresh buffers page-fault), so torch reuses every dead buffer.
    TensorPlay's in-place ops take other, often slower, code paths, so it reuses only:

    * by a Python scalar: ``mul_`` / ``add_`` and ``relu_`` (0.5-1.1x) and ``div_``
      (0.4-0.96x: TensorPlay's out-of-place scalar ``div`` is the slow one), at every size;
    * by a tensor of the result's shape: ``add_`` / ``sub_`` / ``mul_`` from 512 KiB
      (0.5-0.88x). Below it they are 0.6-1.6x: the in-place path costs a few microseconds
      more, which the saved allocation only outweighs once the buffer is large;
    * ``mul_`` by a broadcast operand from 1 MiB (0.58-0.95x; 0.68-1.23x below).

    Never: ``sub_`` by a scalar or ``add_`` / ``sub_`` by a broadcast operand (5-68x
    slower), unary ops other than ``relu_`` (``exp_``, ``tanh_``, ``sqrt_``, ``clamp_``:
    0.9-3.6x, mostly slower), and ``div_`` by a tensor: its float32 result differs from
    ``/`` in the last bit for some elements (eager's result is the reference)."""
    if node.kwargs:
        return False
    others = [arg for arg in node.args if arg is not operand]
    if node.op == "call_method":  # the scalar forms (``eager_program`` made them methods)
        if node.target == "relu":
            return not others
        return node.target in ("mul", "add", "div") and len(others) == 1 and \
            type(others[0]) in (bool, int, float)
    if node.target is operator.truediv or len(others) != 1:
        return False
    other = getattr(others[0], "meta", {}).get("tensor_meta")
    if not isinstance(other, TensorMeta):
        return False
    nbytes = out.nbytes
    if other.shape == out.shape:
        return nbytes >= TENSORPLAY_SAME_SHAPE_BYTES
    return node.target is operator.mul and nbytes >= TENSORPLAY_BROADCAST_BYTES


def _dead_fresh_buffer(value: Any, reader: Any, out: TensorMeta, order: Dict[Any, int]) -> bool:
    """``value`` is a fresh intermediate like ``out``, read last by ``reader``, never viewed."""
    meta = getattr(value, "meta", {}).get("tensor_meta")
    if not isinstance(meta, TensorMeta) or meta.requires_grad or not _fresh(value):
        return False
    if (meta.shape, meta.dtype, meta.device, meta.stride) != \
            (out.shape, out.dtype, out.device, out.stride):
        return False
    users = list(value.users)
    return all(_fresh(user) for user in users) and \
        max(order[user] for user in users) == order[reader]


def _fresh(node: Any) -> bool:
    if node.op == "call_method":
        return node.target in _FRESH_METHODS
    return node.op == "call_function" and _hashable(node.target) and \
        node.target in _FRESH_OPERATORS


def _method_for(node: Any) -> Optional[str]:
    if node.op != "call_function" or node.kwargs or len(node.args) != 2:
        return None
    method = TENSORPLAY_METHODS.get(node.target) if _hashable(node.target) else None
    receiver, other = node.args
    if method is None or type(other) not in (bool, int, float) or not isinstance(getattr(receiver, "meta", {}).get("tensor_meta"),
                                        TensorMeta):
        return None
    return method


def _hashable(target: Any) -> bool:
    try:
        hash(target)
    except TypeError:
        return False
    return True
