"""What a node does besides computing its result: the one effect predicate of every pass.

A node is **in place** when it writes into one of its inputs. The spellings:

* in-place Python operators: ``x += y`` (``operator.iadd`` ... ``ixor``),
  ``x[i] = v`` (``operator.setitem``), ``del x[i]`` (``operator.delitem``),
  and their dunder method names (``__iadd__``, ``__setitem__``);
* in-place names: methods and functions ending in one ``_`` (``x.add_(1)``,
  ``torch.relu_(x)``), but not dunders and not ``operator.and_``-style names;
* ``out=`` (writes into ``out``) and ``inplace=True`` (writes into the first
  argument; also when passed by position to a Python function);
* declared mutations: a target's ``mutates_args`` (our ``CustomOpDef`` and
  TensorPlay's), or a torch ``OpOverload`` whose schema marks an argument
  ``Tensor(a!)`` (``torch.library.custom_op`` ops, ``aten.add_``).

A node is **impure** (dead-code elimination keeps it, reordering never moves
it) when it is a placeholder or output, is in place, has a target declaring
``_is_impure``, has a ``meta["prim"]`` flagged ``side_effect`` or ``random``
for this call (set by ``normalize``; dropping a random draw shifts the random
stream), or carries a ``meta["barrier"]`` fence (the ``barriers`` pass's
verdict, kept on lowered kernel calls whose target no longer says it).

>>> import operator
>>> from tensorplay_graph.ir import Graph
>>> g = Graph(); x = g.placeholder("x")
>>> n = g.call_function(operator.setitem, (x, 0, 1.0))
>>> is_inplace(n), mutated_args(n), mutated_nodes(n)
(True, (0,), (x,))
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
from typing import Any, Dict, Optional, Tuple, Union

from .node import Node, map_aggregate

__all__ = ["is_inplace", "inplace_reason", "mutated_args", "mutated_nodes", "is_impure",
           "declared_mutations", "declares_impure", "prim_effect", "op_label"]

#: Python operators that update their first operand (``x += y``, ``x[i] = v``).
INPLACE_OPERATORS = frozenset(getattr(operator, name) for name in (
    "iadd", "isub", "imul", "imatmul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior",
    "ixor", "ilshift", "irshift", "iconcat", "setitem", "delitem"))

#: Their method spellings (``x.__iadd__(y)``, ``x.__setitem__(i, v)``).
INPLACE_DUNDERS = frozenset(f"__{op.__name__}__" for op in INPLACE_OPERATORS)

ArgRef = Union[int, str]  # a position in node.args or a keyword of node.kwargs


# ----------------------------------------------------------------------------- targets

def _is_inplace_operator(target: Any) -> bool:
    try:
        return target in INPLACE_OPERATORS
    except TypeError:  # unhashable targets are never operator functions
        return False


def _is_inplace_name(name: Any) -> bool:
    """``add_`` / ``_foreach_add_`` / ``__iadd__``; not ``__add__`` nor plain ``add``."""
    if not isinstance(name, str):
        return False
    if name.startswith("__") and name.endswith("__"):
        return name in INPLACE_DUNDERS
    return name.endswith("_") and not name.endswith("__")


def _function_name(target: Any) -> Optional[str]:
    # ``operator.and_`` / ``or_`` / ``not_`` end in ``_`` to dodge keywords, not to mutate.
    if getattr(target, "__module__", None) in ("operator", "_operator"):
        return None
    return getattr(target, "__name__", None)


def declared_mutations(target: Any) -> Tuple[str, ...]:
    """Names of the arguments ``target`` declares it writes (``mutates_args``, schema ``(a!)``)."""
    declared = getattr(target, "mutates_args", None)
    if declared is not None and not callable(declared) and declared:
        return (declared,) if isinstance(declared, str) else tuple(sorted(declared))
    arguments = getattr(getattr(target, "_schema", None), "arguments", None)  # torch OpOverload
    if arguments is None:
        return ()
    return tuple(a.name for a in arguments
                 if getattr(getattr(a, "alias_info", None), "is_write", False))


def declares_impure(target: Any) -> bool:
    """True for targets with a truthy, non-callable ``_is_impure`` attribute (fx's convention)."""
    value = getattr(target, "_is_impure", None)
    return value is not None and not callable(value) and bool(value)


def op_label(node: Node) -> str:
    """A short name of the node's operation for messages (``Tensor.add_``, ``mylib::fill``)."""
    target = node.target
    if node.op == "call_method":
        return f"Tensor.{target}"
    name = getattr(target, "name", None)
    if isinstance(name, str) and getattr(target, "mutates_args", None) is not None:
        return name  # a custom op: its registered "ns::op" name
    return (getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
            or repr(target))


# ----------------------------------------------------------------------------- arguments

@functools.lru_cache(maxsize=1024)
def _parameters(fn: Any) -> Optional[Tuple[str, ...]]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None


def _parameter_names(target: Any) -> Optional[Tuple[str, ...]]:
    """Parameter names of ``target`` in call order, or None when they cannot be known."""
    arguments = getattr(getattr(target, "_schema", None), "arguments", None)
    if arguments is not None:
        return tuple(a.name for a in arguments)
    fn = getattr(target, "signature_fn", None)
    if fn is None and inspect.isfunction(target):
        fn = target
    if fn is None:
        schema = getattr(target, "schema", None)
        return _schema_names(schema) if isinstance(schema, str) else None
    try:
        return _parameters(fn)
    except TypeError:  # unhashable callable
        return None


def _schema_names(schema: str) -> Optional[Tuple[str, ...]]:
    """``"(Tensor(a!) x, float v) -> ()"`` -> ``("x", "v")``."""
    match = re.search(r"\((.*)\)\s*->", schema)  # "ns::op(...) -> ..." or "(...) -> ..."
    if match is None:
        return None
    parts = [p.strip() for p in match.group(1).split(",") if p.strip() and p.strip() != "*"]
    return tuple(p.split("=")[0].split()[-1] for p in parts)


def _inplace_flag(node: Node) -> bool:
    """``inplace=True`` by keyword, or by position for Python functions (``F.relu(x, True)``)."""
    if "inplace" in node.kwargs:
        return node.kwargs["inplace"] is True
    if node.op != "call_function" or len(node.args) < 2 or not inspect.isfunction(node.target):
        return False
    names = _parameter_names(node.target) or ()
    index = names.index("inplace") if "inplace" in names else -1
    return 0 < index < len(node.args) and node.args[index] is True


def _has_node(value: Any) -> bool:
    found = []
    map_aggregate(value, lambda v: found.append(v) if isinstance(v, Node) else None)
    return bool(found)


def _resolve(node: Node, names: Tuple[str, ...]) -> Tuple[ArgRef, ...]:
    """Positions / keywords of the declared-mutated ``names`` in this call.

    When the target's parameter names are unknown every argument holding a
    node counts as written: ordering must stay safe.
    """
    params = _parameter_names(node.target)
    if params is None:
        return (tuple(i for i, a in enumerate(node.args) if _has_node(a))
                + tuple(k for k, v in node.kwargs.items() if _has_node(v)))
    positional = tuple(i for i, p in enumerate(params[: len(node.args)]) if p in names)
    return positional + tuple(k for k in node.kwargs if k in names)


# ----------------------------------------------------------------------------- predicates

def _classify(node: Node) -> Optional[Tuple[str, Tuple[ArgRef, ...]]]:
    """``(sentence, written arguments)`` if ``node`` writes into an input, else None."""
    if node.op not in ("call_function", "call_method"):
        return None
    target = node.target
    first: Tuple[ArgRef, ...] = (0,) if node.args else ()
    if node.op == "call_function":
        declared = declared_mutations(target)
        if declared:
            return (f"{op_label(node)} mutates {', '.join(declared)} (declared)",
                    _resolve(node, declared))
        if _is_inplace_operator(target):
            return f"operator.{target.__name__} updates its first operand in place", first
        name = _function_name(target)
        if _is_inplace_name(name):
            return f"{name} writes into its input in place", first
    elif _is_inplace_name(target):
        return f"Tensor.{target} writes into its input in place", first
    if node.kwargs.get("out") is not None:
        return f"{op_label(node)}(out=...) writes into its `out` argument", ("out",)
    if _inplace_flag(node):
        return f"{op_label(node)}(inplace=True) writes into its input", first
    return None


def inplace_reason(node: Node) -> Optional[str]:
    """A sentence saying how ``node`` writes into an input, or None if it does not."""
    found = _classify(node)
    return None if found is None else found[0]


def is_inplace(node: Node) -> bool:
    """True if ``node`` writes into one of its inputs (see the module docstring for spellings)."""
    return _classify(node) is not None


def mutated_args(node: Node) -> Tuple[ArgRef, ...]:
    """Which arguments ``node`` writes: positions in ``node.args``, keywords of ``node.kwargs``.

    ``()`` when it writes none. Declared mutations (custom ops) resolve their
    names through the op's signature or schema, so a reader of another
    argument need not be ordered against the write.
    """
    found = _classify(node)
    return () if found is None else found[1]


def mutated_nodes(node: Node) -> Tuple[Node, ...]:
    """The nodes ``node`` writes into (the node values of :func:`mutated_args`), in order."""
    found: Dict[Node, None] = {}
    for ref in mutated_args(node):
        value = node.args[ref] if isinstance(ref, int) else node.kwargs[ref]
        map_aggregate(value, lambda v: found.setdefault(v) if isinstance(v, Node) else None)
    return tuple(found)


def prim_effect(node: Node) -> Optional[str]:
    """``"side_effect"`` or ``"random"`` when ``meta["prim"]`` flags this call, else None.

    Honours the prim's ``flags_if`` (``dropout(training=False)`` draws nothing).
    """
    prim = node.meta.get("prim")
    if prim is None or not prim.flags_apply(node.meta.get("prim_args", {})):
        return None
    if prim.side_effect:
        return "side_effect"
    if prim.random:
        return "random"
    return None


def is_impure(node: Node) -> bool:
    """True when ``node`` must be kept even if unread, and keep its order."""
    if node.op in ("placeholder", "output"):
        return True
    if node.op not in ("call_function", "call_method"):
        return False
    barrier = node.meta.get("barrier")
    if barrier is not None and getattr(barrier, "fence", False):
        return True
    return (is_inplace(node) or (node.op == "call_function" and declares_impure(node.target))
            or prim_effect(node) is not None)
