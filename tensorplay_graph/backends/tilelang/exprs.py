"""Typed step expressions for fused pointwise kernels: eager's dtype rules, spelled in TIR.

Inside a pointwise kernel every value is either ``float32`` (inputs are loaded
and cast to float32; arithmetic results) or ``bool`` (comparisons, logic, and
bool-typed results). TIR follows C's rules, not eager's: ``-1 / (x >= y)`` is an
integer division there and ``bool + bool`` overflows a bool constant. So each
operand is converted to what the prim needs before the template is applied:
arithmetic reads float32 (bools become 0.0 / 1.0, Python ints become floats),
``where``'s condition reads bool, and an arithmetic result typed ``bool`` by
eager (``(x > 0) + (y > 0)``) is computed in float32 and compared with 0.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple

from ...prims.rules import is_scalar, result_type
from ..base import node_framework
from .plan import is_node, tensor_meta

#: Canonical argument names that are operands of the computation (others are attributes).
OPERANDS = ("a", "b", "min", "max")
INF = 'T.infinity("float32")'


def scalar_text(value: Any) -> Optional[str]:
    """A Python scalar as a float32 TIR expression; None for NaN (no TIR literal here)."""
    value = float(value)
    if math.isnan(value):
        return None
    if math.isinf(value):
        return INF if value > 0 else f"(-{INF})"
    return repr(value)


def unsupported_constant(node: Any, device: str = "cuda") -> Optional[str]:
    """Why a constant argument of ``node`` cannot be spelled, or None."""
    args = node.meta.get("prim_args") or {}
    for key, value in args.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if key in OPERANDS and math.isnan(float(value)):
                return f"NaN constant {key}={value!r} has no TIR spelling here"
            if key == "alpha" and not math.isfinite(float(value)):
                return f"non-finite alpha={value!r}"
            if key == "alpha" and float(value) == 0.0:
                # spelled as a literal (the template prints it): TIR folds 0.0 * b to 0
                return "alpha=0: TIR folds 0 * b to 0 (eager gives NaN for inf / NaN b)"
    ambiguous = ambiguous_scalar(node)
    if ambiguous:
        return ambiguous
    prim, a, b = node.meta["prim"], args.get("a"), args.get("b")
    # TVM's arith simplifier folds x - x to 0 and x == x to true (eager: NaN for non-finite
    # x); the folded kernel also drops x from its signature. The C target binds each operand
    # to its own opaque variable (see opaque_step), so only CUDA kernels fold.
    if device != "cpu" and "self_constant" in prim.traits and is_node(a) and a is b:
        return f"{prim.name}(x, x): TIR folds it to a constant (eager differs for inf / NaN x)"
    return None


def kind(node: Any) -> str:
    """``"bool"`` or ``"float32"``: how a step's value is held inside the kernel."""
    return "bool" if tensor_meta(node).dtype == "bool" else "float32"


def computing_dtype(node: Any, framework: Optional[str] = None) -> str:
    """The dtype eager converts ``node``'s operands to before computing (see ``Prim.compute``)."""
    prim = node.meta["prim"]
    if prim.compute != "promoted":
        return tensor_meta(node).dtype
    args = node.meta.get("prim_args") or {}
    operands = [tensor_meta(v) if is_node(v) else v for k, v in args.items() if k in OPERANDS]
    return result_type(*[o for o in operands if is_scalar(o) or hasattr(o, "dtype")],
                       framework=framework or node_framework(node))


def ambiguous_scalar(node: Any) -> Optional[str]:
    """Why a comparison's scalar cannot be converted without knowing the framework, or None.

    TensorPlay converts ``-1`` to True in ``bool_x >= -1``, torch keeps -1 (int64). A graph of
    operators only does not say which framework it came from (the reference backend builds
    both variants and picks by its inputs; one C build per framework would double the cost).
    """
    if node.meta["prim"].compute != "promoted":
        return None
    args = node.meta.get("prim_args") or {}
    changed = [v for k, v in args.items()
               if k in OPERANDS and isinstance(v, (int, float)) and float(v) not in (0.0, 1.0)]
    if changed and (computing_dtype(node, "torch") == "bool") != (computing_dtype(node, "tensorplay") == "bool"):
        return (f"{node.meta['prim'].name} of a bool tensor with {changed[0]!r}: TensorPlay compares with "
                f"bool({changed[0]!r}), torch with {changed[0]!r}; the graph does not say which framework")
    return None


def _render(node: Any, kinds: Dict[Any, str], operand: Callable[[str, Any], str]) -> str:
    """``node``'s template over ``operand(key, value)`` texts, converted to what the prim reads."""
    prim = node.meta["prim"]
    args = node.meta.get("prim_args") or {}
    scalars_as_bool = computing_dtype(node) == "bool"
    out: Dict[str, Any] = {}
    for key, value in args.items():
        if is_node(value):
            text, have = operand(key, value), kinds.get(value, "float32")
            if key == "cond":
                text = text if have == "bool" else f"({text} != 0.0)"
            elif key in OPERANDS and have == "bool":
                text = f'T.Cast("float32", {text})'
            out[key] = text
        elif key in OPERANDS and isinstance(value, (bool, int, float)):
            if scalars_as_bool:  # eager converts the scalar first (TensorPlay: bool_x >= -1 is x >= True)
                value = float(value != 0)
            out[key] = operand(key, value)
        else:
            out[key] = value
    expr = prim.render("tilelang", framework=node_framework(node), **out)
    if kind(node) == "bool" and prim.compute == "result":
        # computed in float32 (arithmetic on bools: (x > 0) + (y > 0)); comparisons, logic and
        # casts (compute "promoted" / "none") yield a bool already
        expr = f"({expr} != 0.0)"
    return expr


def step_expr(node: Any, names: Dict[Any, str], kinds: Dict[Any, str], target: str = "cuda") -> str:
    """The TileLang expression of pointwise ``node`` over loop values ``{name}_v``.

    ``kinds`` maps each value node read to ``"bool"`` / ``"float32"`` (inputs are float32).
    """
    def operand(key: str, value: Any) -> str:
        return f"{names[value]}_v" if is_node(value) else scalar_text(value)
    return _render(node, kinds, operand)


def opaque_step(node: Any, names: Dict[Any, str], kinds: Dict[Any, str], prefix: str
                ) -> Tuple[str, Tuple[Tuple[str, str, bool], ...]]:
    """``node``'s expression over fresh variables ``{prefix}_{j}``, one per operand, and the
    ``(variable, source, is_constant)`` bindings: source is a value's name or a constant's text.

    TVM's simplifier rewrites float expressions like integer ones, wherever it can see
    values: ``0.0 * x`` and ``x - x`` fold to 0, ``(a + c) - c`` to ``a``. A variable bound
    to a load from a local buffer is opaque to it, and no two operands share one, so the
    expression is computed as eager computes it. The C compiler folds constants by IEEE rules.
    """
    binds: List[Tuple[str, str, bool]] = []

    def operand(key: str, value: Any) -> str:
        var = f"{prefix}_{len(binds)}"
        if is_node(value):
            binds.append((var, names[value], False))
        else:
            binds.append((var, scalar_text(value), True))
        return var
    return _render(node, kinds, operand), tuple(binds)
