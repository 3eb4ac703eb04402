"""Shape-generic programs: one graph, kernels specialized lazily per concrete shape.

Dynamo hands symbolic graphs to its backends (``dynamic=True``, or automatic
dynamic after a size changed): sizes are SymInts, graph inputs include the size
symbols (``s0``), and nodes compute sizes (``x.size(1) * 2``). Specializing the
import on them would add one Dynamo guard per size -- a new graph per shape.
Instead the graph stays symbolic and :class:`ShapeSpecializingProgram` lowers a
copy of it per concrete input signature, on first use:

* :func:`specialize` binds every size symbol from the call's arguments (a
  SymInt placeholder's int; a dim or stride of a tensor placeholder), gives each
  symbolic tensor node its concrete ``TensorMeta``, and replaces every size
  value (a SymInt / SymFloat / SymBool node all of whose symbols are bound)
  by its number, so kernels see static shapes and scalar constants. Values
  that depend on tensor data (unbacked symbols, ``item()``) are left to run;
* the lowered programs are cached by signature (shapes, strides, dtypes,
  devices of tensors; values of scalars), at most ``limit`` of them (least
  recently used dropped first, logged).

``tensorplay_graph.compile(dynamic=True)`` can use the same runner for a
capture that records sizes symbolically:
``build_runner(gm, args, shape_generic=True)``.

>>> program = ShapeSpecializingProgram(lambda args: lowered_for(args))   # doctest: +SKIP
>>> program(x_len_7); program(x_len_9)      # two lowerings, one graph      # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Callable, Dict, Optional, Tuple

from .frameworks import adapter_for, framework_of, tensor_meta
from .ir.meta import TensorMeta

logger = logging.getLogger("tensorplay_graph.compile")

DEFAULT_SHAPE_CACHE = 16
_SYM_TYPES = ("SymInt", "SymFloat", "SymBool")


def is_sym(value: Any) -> bool:
    """A torch SymInt / SymFloat / SymBool (checked by type: no guard is added)."""
    return type(value).__name__ in _SYM_TYPES and type(value).__module__.startswith("torch")


def _sym_expr(value: Any) -> Any:
    return value.node.expr


def has_symbols(value: Any) -> bool:
    """True when ``value`` (a meta ``val``) holds symbolic sizes anywhere."""
    if is_sym(value):
        return True
    if isinstance(value, (tuple, list)):
        return any(has_symbols(v) for v in value)
    framework = framework_of(value)
    return framework is not None and adapter_for(framework).has_symbolic_sizes(value)


def is_symbolic_graph(gm: Any) -> bool:
    """True when any node of ``gm`` records a symbolic value in ``meta["val"]``."""
    return any(has_symbols(n.meta.get("val")) for n in gm.graph.nodes)


# -- binding symbols ---------------------------------------------------------------------
def symbol_bindings(gm: Any, args: Tuple[Any, ...]) -> Dict[Any, Any]:
    """``{sympy symbol: number}`` read off the call's arguments."""
    bindings: Dict[Any, Any] = {}

    def bind(sym_value: Any, concrete: Any) -> None:
        if is_sym(sym_value) and not is_sym(concrete):
            expr = _sym_expr(sym_value)
            if getattr(expr, "is_Symbol", False):
                bindings[expr] = concrete

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, arg in zip(placeholders, args):
        val = node.meta.get("val")
        if is_sym(val):
            bind(val, arg)
        elif framework_of(val) == "torch" and framework_of(arg) == "torch":
            for s, c in zip(val.shape, arg.shape):
                bind(s, int(c))
            if arg.layout == val.layout and not arg.is_sparse:
                for s, c in zip(val.stride(), arg.stride()):
                    bind(s, int(c))
    return bindings


def _evaluate(value: Any, bindings: Dict[Any, Any]) -> Tuple[bool, Any]:
    """``(True, number)`` for a Sym value whose symbols are all bound, else ``(False, None)``."""
    if not is_sym(value):
        return isinstance(value, (int, float, bool)), value
    expr = _sym_expr(value)
    free = getattr(expr, "free_symbols", set())
    if any(s not in bindings for s in free):
        return False, None
    import sympy
    result = sympy.sympify(expr.xreplace(bindings) if free else expr)
    if not (result.is_number or result in (sympy.true, sympy.false)):
        return False, None
    kind = type(value).__name__
    if kind == "SymBool":
        return True, bool(result)
    return True, (int(result) if kind == "SymInt" else float(result))


def _concrete(value: Any, bindings: Dict[Any, Any]) -> Tuple[bool, Any]:
    """Evaluate a Sym value or a tuple / list of numbers and Sym values."""
    if isinstance(value, (tuple, list)):
        items = [_evaluate(v, bindings) for v in value]
        if not all(ok for ok, _ in items):
            return False, None
        return True, type(value)(v for _, v in items) if isinstance(value, list) \
            else tuple(v for _, v in items)
    return _evaluate(value, bindings)


def _concrete_meta(val: Any, bindings: Dict[Any, Any]) -> Optional[TensorMeta]:
    ok_shape, shape = _concrete(tuple(val.shape), bindings)
    ok_stride, stride = _concrete(tuple(val.stride()), bindings)
    if not (ok_shape and ok_stride):
        return None
    return TensorMeta(shape, str(val.dtype).rsplit(".", 1)[-1], str(val.device), stride,
                      bool(val.requires_grad))


# -- specializing a graph ----------------------------------------------------------------
def specialize(gm: Any, args: Tuple[Any, ...]) -> Any:
    """Make the (copied) symbolic ``gm`` static for ``args``: concrete ``tensor_meta``
    everywhere the symbols allow, size values folded to numbers. Edits ``gm``; returns it.

    Every symbolic ``meta["val"]`` is dropped afterwards: later passes must not read a
    SymInt (its int() is the first call's size, not this call's).
    """
    bindings = symbol_bindings(gm, args)
    graph = gm.graph
    for node in list(graph.nodes):
        val = node.meta.get("val")
        if not has_symbols(val):
            continue
        node.meta.pop("val")
        node.meta.pop("tensor_meta", None)
        if framework_of(val) == "torch":
            meta = _concrete_meta(val, bindings)
            if meta is not None:
                node.meta["tensor_meta"] = meta
            continue
        if isinstance(val, (tuple, list)) and any(framework_of(v) == "torch" for v in val):
            metas = tuple(_concrete_meta(v, bindings) if framework_of(v) == "torch" else None
                          for v in val)
            if all(m is not None for m, v in zip(metas, val) if framework_of(v) == "torch"):
                node.meta["tensor_meta"] = metas
            continue
        ok, number = _concrete(val, bindings)
        if ok and node.op in ("placeholder", "call_function", "call_method"):
            node.replace_all_uses_with(number)
            if node.op != "placeholder" and not node.users:
                graph.erase_node(node)
    for node in graph.nodes:  # placeholders' metas come from the call itself
        if node.op == "placeholder" and "tensor_meta" not in node.meta:
            arg = args[_placeholder_index(graph, node)]
            if framework_of(arg) is not None:
                node.meta["tensor_meta"] = tensor_meta(arg)
    return gm


def _placeholder_index(graph: Any, node: Any) -> int:
    return [n for n in graph.nodes if n.op == "placeholder"].index(node)


def signature(args: Tuple[Any, ...]) -> tuple:
    """The cache key of one call: what a specialized lowering depends on."""
    key = []
    for arg in args:
        if framework_of(arg) is not None:
            key.append((arg.shape, arg.stride(), arg.dtype, arg.device))
        elif isinstance(arg, (int, float, bool, str, type(None))):
            key.append((type(arg), arg))
        else:
            key.append((type(arg), id(arg)))
    return tuple(key)


class ShapeSpecializingProgram:
    """Calls ``build(args)`` once per input signature and runs what it returns.

    ``build`` lowers a copy of the shape-generic graph for ``args`` (see
    :func:`specialize`). At most ``limit`` lowered programs are kept.
    """

    def __init__(self, build: Callable[[Tuple[Any, ...]], Callable[..., Any]],
                 limit: int = DEFAULT_SHAPE_CACHE, name: str = "graph") -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"options['shape_cache_size'] must be a positive int, got {limit!r}")
        self.build = build
        self.limit = limit
        self.name = name
        self.programs: "OrderedDict[tuple, Callable[..., Any]]" = OrderedDict()
        self.builds = 0

    def __call__(self, *args: Any) -> Any:
        key = signature(args)
        program = self.programs.get(key)
        if program is None:
            program = self._build(key, args)
        else:
            self.programs.move_to_end(key)
        return program(*args)

    def _build(self, key: tuple, args: Tuple[Any, ...]) -> Callable[..., Any]:
        if len(self.programs) >= self.limit:
            dropped, _ = self.programs.popitem(last=False)
            logger.info("%s: shape cache full (%d lowered programs); dropping the least "
                        "recently used one", self.name, self.limit)
        self.builds += 1
        logger.debug("%s: lowering for a new input signature (%d so far)", self.name, self.builds)
        program = self.programs[key] = self.build(args)
        return program
