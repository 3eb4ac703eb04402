"""``Graph``: an ordered, doubly linked list of :class:`Node` (torch.fx's design).

A sentinel ``root`` node closes the list; new nodes go to the current insert
point (the end, unless inside ``inserting_before``/``inserting_after``).
Every structural edit bumps ``graph._version`` and tells the GraphModules
built on this graph that their generated code is stale.

>>> import operator
>>> g = Graph()
>>> x = g.placeholder("x")
>>> y = g.call_function(operator.mul, (x, 2))
>>> _ = g.output(y)
>>> print(g.python_code())                              # doctest: +NORMALIZE_WHITESPACE
def forward(self, x):
    mul = x * 2
    return mul
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ..errors import GraphLintError
from . import effects
from .names import RESERVED_NAMES, Namespace, is_identifier
from .node import Node, target_name, _format_arg

_EMPTY = object()

class _InsertPoint:
    """Sets a graph's insert point now; restores the previous one on ``__exit__``."""

    def __init__(self, graph: "Graph", insert: Callable[[Node], None]) -> None:
        self.graph = graph
        self.previous = graph._insert
        graph._insert = insert

    def __enter__(self) -> "_InsertPoint":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.graph._insert = self.previous


class NodeList:
    """A live view of a graph's nodes: iteration, ``len``, ``reversed``.

    Erasing the node being visited while iterating is safe.
    """

    def __init__(self, graph: "Graph", reverse: bool = False) -> None:
        self._graph = graph
        self._reverse = reverse

    def __len__(self) -> int:
        return self._graph._len

    def __iter__(self) -> Iterator[Node]:
        root = self._graph._root
        step = "_prev" if self._reverse else "_next"
        cur = getattr(root, step)
        while cur is not root:
            if not cur._erased:
                yield cur
            cur = getattr(cur, step)

    def __reversed__(self) -> "NodeList":
        return NodeList(self._graph, not self._reverse)

    def __repr__(self) -> str:
        return f"[{', '.join(n.name for n in self)}]"


class Graph:
    """A program as a list of nodes, built and edited like ``torch.fx.Graph``."""

    def __init__(self) -> None:
        self._root = Node(self, "", "root", "", (), {})
        self._len = 0
        self._namespace = Namespace(reserved=RESERVED_NAMES)
        #: Appending at the end: the default insert point, linked inline by create_node.
        self._append: Callable[[Node], None] = self._root.prepend
        self._insert: Callable[[Node], None] = self._append
        self._version = 0
        self._owners: List[weakref.ref] = []  # GraphModules whose code is up to date
        self._owning_module: Optional[weakref.ref] = None
        #: ``"torch"`` / ``"tensorplay"``: whose eager semantics the program follows (set by
        #: capture, kept by copies); None where unknown (see ``frameworks.graph_framework``).
        self.framework: Optional[str] = None

    # -- change tracking --------------------------------------------------------
    def _mutated(self) -> None:
        self._version += 1
        if self._owners:
            owners, self._owners = self._owners, []
            for ref in owners:
                owner = ref()
                if owner is not None:
                    owner._graph_changed()

    def _watch(self, owner: Any) -> None:
        """Call ``owner._graph_changed()`` once, at the next mutation."""
        self._owners.append(weakref.ref(owner))

    def _set_owning_module(self, owner: Any) -> None:
        if self.owning_module is None:
            self._owning_module = weakref.ref(owner)

    @property
    def owning_module(self) -> Any:
        """The first GraphModule built on this graph (``None`` if none is alive)."""
        return self._owning_module() if self._owning_module is not None else None

    # -- nodes ------------------------------------------------------------------
    @property
    def nodes(self) -> NodeList:
        return NodeList(self)

    def find_nodes(self, *, op: str, target: Any = _EMPTY) -> List[Node]:
        """Nodes with this ``op`` (and ``target``, when given), in graph order."""
        return [n for n in self.nodes
                if n.op == op and (target is _EMPTY or n.target is target or n.target == target)]

    def output_node(self) -> Optional[Node]:
        """The ``output`` node, or ``None``."""
        last = self._root._prev
        return last if last is not self._root and last.op == "output" else None

    # -- building ---------------------------------------------------------------
    def create_node(self, op: str, target: Any, args: Optional[Tuple[Any, ...]] = None,
                    kwargs: Optional[Dict[str, Any]] = None, name: Optional[str] = None,
                    type_expr: Any = None) -> Node:
        """Create a node at the insert point; ``name`` is made unique and safe."""
        candidate = name if name is not None else self._default_name(op, target)
        node = Node(self, self._namespace.create_name(candidate), op, target, args or (), kwargs)
        if type_expr is not None:
            node.meta["type"] = type_expr
        if self._insert is self._append:  # the common case (one per captured op), inline
            root = self._root
            last = root._prev
            last._next, node._prev, node._next, root._prev = node, last, root, node
            self._mutated()
        else:
            self._insert(node)
        self._len += 1
        return node

    def _default_name(self, op: str, target: Any) -> str:
        if op in ("placeholder", "get_attr", "call_method") and isinstance(target, str):
            return target.replace(".", "_")
        if op == "output":
            return "output"
        name = getattr(target, "__name__", None)
        return name if isinstance(name, str) else target_name(target).rsplit(".", 1)[-1]

    def placeholder(self, name: str, type_expr: Any = None, default_value: Any = _EMPTY) -> Node:
        """A function input named ``name``; ``default_value`` makes it optional."""
        args = () if default_value is _EMPTY else (default_value,)
        return self.create_node("placeholder", name, args, name=name, type_expr=type_expr)

    def get_attr(self, qualified_name: str, type_expr: Any = None) -> Node:
        """Read attribute ``qualified_name`` (``"fc1.weight"``) of the owning module."""
        if not isinstance(qualified_name, str) or not all(
                is_identifier(atom) for atom in qualified_name.split(".")):
            raise ValueError(f"get_attr target {qualified_name!r} is not a dotted identifier path; "
                             "store the value under a sanitized attribute name")
        return self.create_node("get_attr", qualified_name, type_expr=type_expr)

    def call_function(self, the_function: Callable[..., Any], args: Optional[Tuple[Any, ...]] = None,
                      kwargs: Optional[Dict[str, Any]] = None, type_expr: Any = None,
                      name: Optional[str] = None) -> Node:
        """``the_function(*args, **kwargs)``."""
        return self.create_node("call_function", the_function, args, kwargs, name, type_expr)

    def call_method(self, method_name: str, args: Optional[Tuple[Any, ...]] = None,
                    kwargs: Optional[Dict[str, Any]] = None, type_expr: Any = None,
                    name: Optional[str] = None) -> Node:
        """``args[0].method_name(*args[1:], **kwargs)``."""
        if not is_identifier(method_name):
            raise ValueError(f"call_method target {method_name!r} is not a valid method name")
        return self.create_node("call_method", method_name, args, kwargs, name, type_expr)

    def output(self, result: Any, type_expr: Any = None) -> Node:
        """The value the graph returns (a Node, constant or nested container)."""
        return self.create_node("output", "output", (result,), type_expr=type_expr)

    def inserting_before(self, n: Optional[Node] = None) -> _InsertPoint:
        """Context manager: new nodes go just before ``n`` (the start when ``None``)."""
        if n is None:
            return self.inserting_after(self._root)
        self._check_owned(n)
        return _InsertPoint(self, n.prepend)

    def inserting_after(self, n: Optional[Node] = None) -> _InsertPoint:
        """Context manager: new nodes go just after ``n`` (the end when ``None``)."""
        if n is None:
            return _InsertPoint(self, self._append)
        if n is not self._root:
            self._check_owned(n)
        cursor = [n]

        def insert(x: Node) -> None:
            # Advance past each new node so a run of inserts keeps its order.
            cursor[0].append(x)
            cursor[0] = x
        return _InsertPoint(self, insert)

    def _check_owned(self, n: Node) -> None:
        if n.graph is not self or n._erased:
            raise GraphLintError(f"node {n} is not in this graph (erased or from another graph); "
                                 "pick an insert point among graph.nodes")

    # -- editing ----------------------------------------------------------------
    def erase_node(self, to_erase: Node) -> None:
        """Remove a node that nothing reads any more."""
        self._check_owned(to_erase)
        if to_erase.users:
            users = ", ".join(u.name for u in to_erase.users)
            raise GraphLintError(
                f"cannot erase node {to_erase} ({to_erase.op} {target_name(to_erase.target)}): "
                f"it still has users [{users}]; call {to_erase}.replace_all_uses_with(...) "
                "or erase the users first")
        to_erase._unlink()
        to_erase._erased = True
        self._len -= 1
        to_erase._update_args_kwargs((), {})
        self._mutated()

    def _rename(self, node: Node, candidate: str) -> None:
        if candidate == node.name:
            return
        self._namespace.release(node.name)
        node._name = self._namespace.create_name(candidate)
        self._mutated()

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda n: n) -> Node:
        """Copy ``node`` (possibly of another graph) here, mapping its input nodes."""
        from .node import map_arg
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        new = self.create_node(node.op, node.target, args, kwargs, name=node.name)
        new.meta = dict(node.meta)
        return new

    def graph_copy(self, g: "Graph", val_map: Dict[Node, Any],
                   return_output_node: bool = False) -> Any:
        """Copy every node of ``g`` except its output here; return the output value.

        ``val_map`` maps nodes of ``g`` to values here; pre-filled entries
        (e.g. placeholders) are used instead of copies.
        """
        from .node import map_arg
        self.framework = self.framework or g.framework
        for node in g.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                value = map_arg(node.args[0], lambda n: val_map[n])
                return (value, node) if return_output_node else value
            val_map[node] = self.node_copy(node, lambda n: val_map[n])
        return None

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Graph":
        """A new graph with copies of every node (names and meta kept; meta values shared)."""
        new = Graph()
        memo[id(self)] = new
        copied = new.graph_copy(self, {}, return_output_node=True)
        if copied is not None:
            value, old_output = copied
            new.output(value).meta = dict(old_output.meta)
        return new

    def eliminate_dead_code(self, is_impure: Optional[Callable[[Node], bool]] = None) -> bool:
        """Erase unread nodes, last to first; returns whether anything changed.

        A node is kept when :func:`tensorplay_graph.ir.effects.is_impure` says
        so (placeholders, outputs, in-place writes, side effects, random
        draws), or when the extra ``is_impure(node)`` hook returns True.
        """
        changed = False
        for node in reversed(self.nodes):
            if node.users or effects.is_impure(node) or (is_impure is not None and is_impure(node)):
                continue
            self.erase_node(node)
            changed = True
        return changed

    # -- checking and printing --------------------------------------------------
    def lint(self) -> None:
        """Raise :class:`GraphLintError` naming the first broken invariant."""
        from .lint import lint_graph
        lint_graph(self)

    def python_code(self, root_module: str = "self", annotate_errors: bool = False) -> Any:
        """Generated source of ``forward`` (a ``str`` with a ``.globals`` dict)."""
        from .codegen import generate
        return generate(self, annotate_errors=annotate_errors)

    def __str__(self) -> str:
        return format_table(self)

    def print_tabular(self) -> str:
        """The node table (name | op | target | args | kwargs | shape) as a string."""
        return format_table(self)

    def __len__(self) -> int:
        return self._len


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def format_table(graph: Graph) -> str:
    """One row per node: name | op | target | args | kwargs | meta shape."""
    header = ("name", "op", "target", "args", "kwargs", "shape")
    rows = [header]
    for n in graph.nodes:
        meta = n.meta.get("tensor_meta")
        if isinstance(meta, (tuple, list)):
            shape = "(" + ", ".join(str(m) for m in meta) + ")"
        else:
            shape = "" if meta is None else str(meta)
        rows.append((n.name, n.op, _clip(target_name(n.target)), _clip(_format_arg(n.args)),
                     _clip(_format_arg(dict(n.kwargs))) if n.kwargs else "", shape))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for i, row in enumerate(rows):
        lines.append(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)
