"""``functionalize``: in-place ops on program-local tensors become their out-of-place prims.

``relu(inplace=True)``, ``F.relu_(h)``, ``h += y``, ``h.mul_(2)`` are mutation fences,
so they split regions. When ``h`` is a tensor the program created itself and nothing
can observe the write except through ``h``, the write is replaced by a new value::

    h2 = h.mul_(2); z = f(h)    ==>    h2 = h.mul(2); z = f(h2)

Rewritten when all of these hold (otherwise the node stays a mutation, with eager
semantics and its fence):

* the node writes into its first argument only (``x.op_(...)``, ``operator.iop``,
  ``inplace=True``), and the out-of-place spelling is a ``pointwise`` prim other than
  ``cast`` whose result has the input's shape and dtype (``int_x.mul_(2.5)`` raises in
  eager; ``fp16_x += fp32_y`` casts back: both stay);
* the written tensor is *fresh*: made by a pointwise (not ``cast``: ``x.float()`` may
  return ``x`` itself), reduction, norm or matmul prim, or a convolution / batch norm
  -- never a placeholder, parameter, buffer, constant, view or an unknown op's result,
  which may alias memory the caller can see;
* every reader of it placed before the write only computes a new tensor from it (the
  same fresh kinds): no view, alias or opaque op holds it across the write.

Readers placed after the write -- the in-place node's own users, later users of the
tensor, further in-place ops, the graph output -- read the new value instead. Writes
are visited in program order, so chains (``h += r; h.relu_()``) become pure pointwise
chains. Runs after ``shape_prop``; every new node gets its prim and ``tensor_meta``.

>>> functionalize(gm)      # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import logging
import operator
from typing import Any, Dict, Optional, Tuple

from ..frameworks import adapter_for
from ..ir.effects import is_inplace, mutated_args
from ..ir.meta import TensorMeta
from ..ir.node import Node
from .decompose import annotate
from .normalize import graph_framework

log = logging.getLogger(__name__)

__all__ = ["functionalize", "out_of_place", "is_fresh"]

_OUT_OF_PLACE_OPERATORS = {getattr(operator, f"i{name.rstrip('_')}"): getattr(operator, name)
                           for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                                        "and_", "or_", "xor", "lshift", "rshift")}
_FRESH_KINDS = frozenset({"pointwise", "reduction", "norm", "matmul", "gather"})
#: Opaque prims whose result is always a new tensor.
_FRESH_OPAQUE = frozenset({"conv1d", "conv2d", "conv3d", "batch_norm"})
_MODULES = {"torch": ("torch", "torch.nn.functional"),
            "tensorplay": ("tensorplay", "tensorplay.functional", "tensorplay.nn.functional")}


def is_fresh(node: Any) -> bool:
    """True when ``node``'s value is a new tensor no other value aliases at creation."""
    if not isinstance(node, Node) or node.op not in ("call_function", "call_method"):
        return False
    prim = node.meta.get("prim")
    if prim is None or is_inplace(node):
        return False
    if prim.kind in _FRESH_KINDS:
        return prim.name != "cast"
    return prim.name in _FRESH_OPAQUE


def _pure_reader(node: Node) -> bool:
    """A reader that only computes a new tensor from its inputs (keeps no alias)."""
    return is_fresh(node)


def _function_named(target: Any, name: str, framework: str) -> Optional[Any]:
    adapter = adapter_for(framework)
    found = getattr(inspect.getmodule(target), name, None)  # the target's own module first
    for module_name in _MODULES.get(framework, ()):
        if callable(found):
            return found
        found = adapter.callable_named(module_name, name)
    return found if callable(found) else None


def out_of_place(node: Node, framework: str) -> Optional[Tuple[str, Any, tuple, Dict[str, Any]]]:
    """``(op, target, args, kwargs)`` of the out-of-place call computing what ``node`` writes,
    or None when there is none (or it is not certain)."""
    if mutated_args(node) != (0,):
        return None
    args, kwargs = tuple(node.args), dict(node.kwargs)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
        return node.op, node.target, args, kwargs
    if node.op == "call_method":
        name = node.target
        if name.startswith("__"):  # x.__iadd__(y)
            plain = {f"__i{n.rstrip('_')}__": f"__{n.rstrip('_')}__"
                     for n in ("add", "sub", "mul", "truediv")}.get(name)
            return None if plain is None else ("call_method", plain, args, kwargs)
        meta = getattr(args[0], "meta", {}).get("tensor_meta") if args else None
        if framework == "tensorplay" and name in ("clamp_", "clip_") and \
                getattr(meta, "dtype", None) == "bool":
            return None  # TensorPlay 1.0.0: a bool clamp_ clamps numerically, clamp casts the bounds
        return "call_method", name[:-1], args, kwargs
    if node.target in _OUT_OF_PLACE_OPERATORS:
        return "call_function", _OUT_OF_PLACE_OPERATORS[node.target], args, kwargs
    name = getattr(node.target, "__name__", None)
    if isinstance(name, str) and name.endswith("_") and not name.endswith("__"):
        target = _function_named(node.target, name[:-1], framework)
        return None if target is None else ("call_function", target, args, kwargs)
    if inspect.isfunction(node.target) and "inplace" in _parameters(node.target):
        index = _parameters(node.target).index("inplace")
        if index < len(args) and args[index] is True:  # F.relu(x, True)
            return node.op, node.target, args[:index] + (False,) + args[index + 1:], kwargs
    return None


def _parameters(fn: Any) -> Tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _has_method(framework: str, name: str) -> bool:
    adapter = adapter_for(framework)
    return adapter.loaded() and callable(adapter.method(name))


def _rewrite(node: Node, order: Dict[Node, int], framework: str) -> bool:
    """Replace one in-place ``node`` by its out-of-place call; False leaves it alone."""
    written = node.args[0] if node.args else None
    if not is_fresh(written):
        return False
    if any(order[user] < order[node] and not _pure_reader(user) for user in written.users):
        return False  # something made before the write may alias the tensor
    call = out_of_place(node, framework)
    if call is None or (call[0] == "call_method" and not _has_method(framework, call[1])):
        return False
    graph, meta = node.graph, node.meta.get("tensor_meta")
    with graph.inserting_before(node):
        new = graph.create_node(call[0], call[1], call[2], call[3])
    new.meta["stack"] = node.meta.get("stack")
    expected = written.meta.get("tensor_meta")
    ok = annotate(new, framework) and new.meta["prim"].kind == "pointwise" and \
        new.meta["prim"].name != "cast" and isinstance(expected, TensorMeta) and \
        new.meta["tensor_meta"].shape == expected.shape and \
        new.meta["tensor_meta"].dtype == expected.dtype
    if not ok:
        graph.erase_node(new)
        return False
    if isinstance(meta, TensorMeta):  # capture measured it: keep its strides
        new.meta["tensor_meta"] = meta
    order[new] = order[node]
    node.replace_all_uses_with(new)
    written.replace_all_uses_with(new, lambda user: user is not new and
                                  order.get(user, len(order)) > order[node])
    graph.erase_node(node)
    return True


def functionalize(gm: Any) -> Any:
    """Rewrite in-place ops on fresh program-local tensors (module docstring)."""
    from .normalize import normalize

    graph = getattr(gm, "graph", gm)
    order = {node: i for i, node in enumerate(graph.nodes)}
    if not any(is_inplace(n) for n in order):
        return gm
    framework = graph_framework(graph)
    changed = 0
    for node in list(graph.nodes):
        if node.op in ("call_function", "call_method") and is_inplace(node):
            changed += _rewrite(node, order, framework)
    if changed:
        normalize(gm)  # readers' prim_args still name the replaced nodes
        log.debug("functionalize: %d in-place ops rewritten out of place", changed)
    return gm
