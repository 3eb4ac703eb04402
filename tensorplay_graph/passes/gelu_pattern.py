"""Which graph values compute the tanh-GELU of another: the ``gelu`` prim with
``approximate="tanh"``, or the formula models spell out, ``0.5 * x * (1 + tanh(sqrt(2 / pi) *
(x + 0.044715 * x ** 3)))``, in any association of its products and sums (GPT-2's
``NewGELUActivation``, ``FastGELUActivation``'s ``x * 0.7978845608 * (1 + 0.044715 * x * x)``).

Products are flattened into their scalar part and factors; the tanh's argument is read as
a polynomial in ``x`` (adds, subs, muls, integer powers, negation, scalars) and compared
with ``sqrt(2 / pi) * (x + 0.044715 * x ** 3)`` coefficient by coefficient.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Set, Tuple

from ..ir.node import Node
from ..prims import prim_name

__all__ = ["tanh_gelu_input", "prim_args"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715
_REL_TOL = 1e-7


def prim_args(node: Node) -> Dict[str, Any]:
    return node.meta.get("prim_args") or {}


def _scalar(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


Poly = Dict[int, float]  # power of x -> coefficient


def _mul(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for i, a in p.items():
        for j, b in q.items():
            out[i + j] = out.get(i + j, 0.0) + a * b
    return out


def _add(p: Poly, q: Poly, scale: float = 1.0) -> Poly:
    out = dict(p)
    for i, b in q.items():
        out[i] = out.get(i, 0.0) + scale * b
    return out


def _poly(value: Any, x: Node, seen: Set[Node], depth: int = 0) -> Optional[Poly]:
    """``value`` as a polynomial in ``x`` (adds, muls, integer powers, scalars), recording
    the nodes it passes in ``seen``; None when it is anything else."""
    c = _scalar(value)
    if c is not None:
        return {0: c}
    if value is x:
        return {1: 1.0}
    name = prim_name(value)
    if name is None or depth > 8:  # the formula is 4 deep; bounds the walk of a shared DAG
        return None
    args = prim_args(value)
    if name in ("add", "sub"):
        alpha = _scalar(args.get("alpha", 1))
        p, q = _poly(args.get("a"), x, seen, depth + 1), _poly(args.get("b"), x, seen, depth + 1)
        if p is None or q is None or alpha is None:
            return None
        out = _add(p, q, alpha if name == "add" else -alpha)
    elif name == "mul":
        p, q = _poly(args.get("a"), x, seen, depth + 1), _poly(args.get("b"), x, seen, depth + 1)
        if p is None or q is None:
            return None
        out = _mul(p, q)
    elif name == "pow":
        e = _scalar(args.get("b"))
        p = _poly(args.get("a"), x, seen, depth + 1)
        if p is None or e is None or e != int(e) or not 1 <= e <= 3:
            return None
        out = p
        for _ in range(int(e) - 1):
            out = _mul(out, p)
    elif name == "neg":
        p = _poly(args.get("a"), x, seen, depth + 1)
        if p is None:
            return None
        out = {i: -a for i, a in p.items()}
    else:
        return None
    seen.add(value)
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL_TOL * abs(b)


def _is(p: Optional[Poly], expected: Poly) -> bool:
    if p is None:
        return False
    powers = {i for i, a in p.items() if a != 0.0} | set(expected)
    return all(_close(p.get(i, 0.0), expected.get(i, 0.0)) for i in powers)


def _factors(value: Any, seen: Set[Node], out: List[Any], depth: int = 0) -> float:
    """Flatten a product tree into its non-scalar factors (``out``); returns the scalar part.
    Past a few levels the rest counts as one factor (no GELU is that deep; a long chain of
    products must not cost a walk per node)."""
    c = _scalar(value)
    if c is not None:
        return c
    if prim_name(value) == "mul" and depth < 4:
        args = prim_args(value)
        seen.add(value)
        return _factors(args.get("a"), seen, out, depth + 1) * \
            _factors(args.get("b"), seen, out, depth + 1)
    out.append(value)
    return 1.0


def _one_plus_tanh(value: Any, seen: Set[Node]) -> Optional[Node]:
    """``T`` when ``value`` is ``1 + tanh(T)`` (either order), else None."""
    if prim_name(value) != "add" or _scalar(prim_args(value).get("alpha", 1)) != 1.0:
        return None
    a, b = prim_args(value).get("a"), prim_args(value).get("b")
    if _scalar(a) == 1.0 and prim_name(b) == "tanh":
        th = b
    elif _scalar(b) == 1.0 and prim_name(a) == "tanh":
        th = a
    else:
        return None
    seen.update((value, th))
    return prim_args(th).get("a")


def tanh_gelu_input(out: Node) -> Optional[Tuple[Node, Set[Node]]]:
    """``(x, nodes)`` when ``out`` computes the tanh-GELU of ``x``; ``nodes``: the pattern's
    nodes from ``out`` back to (not including) ``x``. None otherwise."""
    name = prim_name(out)
    if name == "gelu":
        x = prim_args(out).get("a")
        return (x, {out}) if prim_args(out).get("approximate") == "tanh" and isinstance(x, Node) \
            else None
    if name != "mul":
        return None
    seen: Set[Node] = set()
    factors: List[Any] = []
    scale = _factors(out, seen, factors)
    if len(factors) != 2 or not _close(scale, 0.5):
        return None
    for x, other in (factors, factors[::-1]):
        inner_seen: Set[Node] = set()
        inner = _one_plus_tanh(other, inner_seen)
        if inner is None or not isinstance(x, Node):
            continue
        if _is(_poly(inner, x, inner_seen), {1: _SQRT_2_OVER_PI, 3: _SQRT_2_OVER_PI * _CUBIC}):
            return x, seen | inner_seen
    return None


