"""The program that runs a captured graph through eager dispatch (``"auto"`` on the CPU).

Same ops, cheaper bindings. A TensorPlay tensor's Python operators (``x * y``) go
through a generic binary-operator wrapper that costs about 0.7 us more per call than
the method bound to the same native op (``x.mul(y)``; measured on 32x256 float32,
min of many short samples: 2.9 vs 2.3 us). A program of small tensors pays that on
every op, more than the compiled function's whole per-call check, so the copy of the
graph that runs calls the methods instead. Only operators whose left operand the
capture recorded as a tensor are rewritten, and only those whose method gives the
operator's result for every dtype pair and Python scalar kind
(``tests/test_eager_dispatch.py`` checks them against eager). torch's operators
cost the same as its methods: torch graphs run as captured.

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
    operator.pow: "pow", operator.matmul: "matmul",
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
    receiver = node.args[0]
    if method is None or not isinstance(getattr(receiver, "meta", {}).get("tensor_meta"),
                                        TensorMeta):
        return None
    return method


def _hashable(target: Any) -> bool:
    try:
        hash(target)
    except TypeError:
        return False
    return True
