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

>>> run = eager_program(captured_gm, "tensorplay")        # doctest: +SKIP
>>> "x.mul(1.5)" in run.code                               # doctest: +SKIP
True
"""

from __future__ import annotations

import operator
from typing import Any, Optional

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
