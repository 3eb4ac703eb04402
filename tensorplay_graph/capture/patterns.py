"""Patterns a framework's tracer decomposed, folded back into the op they spell.

TensorPlay's tracer hands ``nn.GELU`` to a backend as ``x * (erf(x * 0.7071...) + 1) * 0.5``:
five eager ops where the framework has one kernel. Folded back into one ``gelu`` call, it is
one prim (fused by a backend that claims it, or one eager call when none does).
"""

from __future__ import annotations

import math
import operator
from typing import Any, Optional

__all__ = ["fold_erf_gelu"]

_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _scalar_operand(node: Any, target: Any, value: float) -> Optional[Any]:
    """The tensor operand of ``node`` when it is ``target(t, value)`` or ``target(value, t)``."""
    if node.op != "call_function" or node.target is not target or len(node.args) != 2 \
            or node.kwargs:
        return None
    a, b = node.args
    for tensor, scalar in ((a, b), (b, a)):
        if isinstance(scalar, (int, float)) and not isinstance(scalar, bool) and \
                math.isclose(scalar, value, rel_tol=1e-12) and hasattr(tensor, "op"):
            return tensor
    return None


def _only_user(node: Any) -> Optional[Any]:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def fold_erf_gelu(graph: Any, gelu: Any) -> int:
    """Replace every ``x * ((erf(x * 1/sqrt(2)) + 1) * 0.5)`` (any operand order) by
    ``gelu(x)``; returns how many were folded."""
    folded = 0
    for erf in list(graph.nodes):
        if erf.op != "call_method" or erf.target != "erf" or len(erf.args) != 1:
            continue
        scaled = erf.args[0]
        x = _scalar_operand(scaled, operator.mul, _INV_SQRT2) if hasattr(scaled, "op") else None
        plus = _only_user(erf)
        half = _only_user(plus) if plus is not None else None
        out = _only_user(half) if half is not None else None
        if x is None or out is None or _only_user(scaled) is not erf or \
                _scalar_operand(plus, operator.add, 1.0) is not erf or \
                _scalar_operand(half, operator.mul, 0.5) is not plus or \
                out.op != "call_function" or out.target is not operator.mul or out.kwargs or \
                set(out.args) != {x, half} or len(out.args) != 2:
            continue
        with graph.inserting_before(out):
            replacement = graph.call_function(gelu, (x,))
        replacement.meta.update({k: v for k, v in out.meta.items() if k in ("val", "tensor_meta")})
        out.replace_all_uses_with(replacement)
        for dead in (out, half, plus, erf, scaled):
            graph.erase_node(dead)
        folded += 1
    return folded
