"""A Triton region's node operands: their metadata, and how eager treats Python-scalar operands.

Eager casts a Python number to a 16-bit float operand's dtype before computing (except the
ops a framework keeps in float32, ``prims.rules.scalar_kept_in_opmath``), and types
integer-literal results by promotion; the generated kernel must do the same
(tests/fuzz/FINDINGS.md, seeds 40000579, 20001675).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ..base import node_framework
from ...errors import LoweringError
from ...prims.pointwise_lowerings import HALF_FLOATS


def is_node(value: Any) -> bool:
    return hasattr(value, "op") and hasattr(value, "meta") and hasattr(value, "users")


def node_meta(node: Any):
    tm = node.meta.get("tensor_meta")
    if tm is None or isinstance(tm, (tuple, list)):
        raise LoweringError(f"triton backend: node {node.name} has no single tensor_meta; "
                            "run shape_prop before lowering")
    return tm


#: Pointwise arguments that are operands of the computation (``cond`` of where is not).
OPERAND_KEYS = ("a", "b", "min", "max")


def scalar_cast_dtype(node: Any, prim: Any, args: Dict[str, Any]) -> Optional[str]:
    """The 16-bit float dtype eager casts a pointwise node's Python-scalar operands to
    (``fp16_x + 70000`` adds fp16(70000) = inf, seed 40000579: ``70000.0 ** x``), else None."""
    from ...prims.rules import result_type

    if prim.compute == "none":
        return None
    common = node_meta(node).dtype
    if prim.compute == "promoted":
        common = result_type(*[node_meta(v) if is_node(v) else v for k, v in args.items()
                               if k in OPERAND_KEYS and (is_node(v) or _number(v))],
                             framework=node_framework(node))
    return common if common in HALF_FLOATS else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def round_scalar(value: Any, dtype: str) -> Any:
    """A Python int / float operand rounded to float16 / bfloat16 as eager's cast rounds it
    (to nearest even; out of range -> inf); other values unchanged."""
    if not _number(value):
        return value
    import numpy as np

    with np.errstate(over="ignore"):
        single = np.float32(value)
        if dtype == "float16":
            return float(np.float16(single))
    if not np.isfinite(single):
        return float(single)
    bits = int(single.view(np.uint32))
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16  # bfloat16: nearest even
    return float(np.uint32(bits & 0xFFFFFFFF).view(np.float32))


def literal_integers(prim: Any, args: Dict[str, Any], dtype: str) -> bool:
    """True when an integer result is computed from Python int operands only."""
    if dtype == "bool" or dtype.startswith("float") or prim.compute == "none":
        return False
    operands = [args[k] for k in OPERAND_KEYS if k in args]
    return bool(operands) and not any(is_node(v) for v in operands)


def integer_operand_dtype(args: Dict[str, Any]) -> Optional[str]:
    """Eager's promoted dtype of a pointwise node's operands when it is integer or bool."""
    from ...prims.rules import result_type

    operands = [node_meta(v) if is_node(v) else v for k, v in args.items()
                if k in OPERAND_KEYS and (is_node(v) or isinstance(v, (bool, int, float)))]
    if not any(is_node(args[k]) for k in OPERAND_KEYS if k in args):
        return None
    common = result_type(*operands)
    return None if common.startswith("float") else common
