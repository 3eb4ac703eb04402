"""``Node``: one operation of a :class:`~tensorplay_graph.ir.graph.Graph`.

The API follows ``torch.fx.Node``. Nodes live in their graph's doubly linked
list; ``args``/``kwargs`` may nest tuples, lists, dicts and slices whose
leaves are Nodes or constants; ``users`` is kept exact by the setters, so
edit a node only through them (or the verbs built on them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from .graph import Graph

#: The closed set of opcodes. ``root`` is only used by a graph's sentinel.
#:
#: ==================  =================================  ===========================================
#: op                  target                             meaning
#: ==================  =================================  ===========================================
#: ``placeholder``     parameter name (str)               a function input; ``args[0]`` = default
#: ``get_attr``        attribute qualname (``"fc.w"``)    a value owned by the GraphModule
#: ``call_function``   a callable                         ``target(*args, **kwargs)``
#: ``call_method``     method name (str)                  ``args[0].target(*args[1:], **kwargs)``
#: ``output``          ``"output"``                       ``args[0]`` is the returned value
#: ==================  =================================  ===========================================
OPCODES = ("placeholder", "get_attr", "call_function", "call_method", "output")


class ImmutableList(list):
    """A list inside node args: mutating it in place would bypass ``users`` upkeep."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("node args are immutable; assign node.args / node.update_arg() instead")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __reduce__(self) -> Any:
        return (ImmutableList, (list(self),))


class ImmutableDict(dict):
    """A dict inside node args/kwargs, frozen for the same reason as :class:`ImmutableList`."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("node kwargs are immutable; assign node.kwargs / node.update_kwarg() instead")

    __setitem__ = __delitem__ = __ior__ = _refuse
    update = pop = popitem = clear = setdefault = _refuse

    def __reduce__(self) -> Any:
        return (ImmutableDict, (dict(self),))


#: The empty kwargs every node without keywords shares (immutable, so sharing is safe).
_NO_KWARGS = ImmutableDict()


def map_aggregate(a: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every leaf of a nested tuple/list/dict/slice structure.

    Lists and dicts come back as plain ``list``/``dict`` (frameworks may want
    exact types); tuples keep their type (namedtuples included).
    """
    if isinstance(a, tuple):
        mapped = [map_aggregate(elem, fn) for elem in a]
        return type(a)(*mapped) if hasattr(a, "_fields") else tuple(mapped)
    if isinstance(a, list):
        return [map_aggregate(elem, fn) for elem in a]
    if isinstance(a, dict):
        return {key: map_aggregate(value, fn) for key, value in a.items()}
    if isinstance(a, slice):
        return slice(map_aggregate(a.start, fn), map_aggregate(a.stop, fn), map_aggregate(a.step, fn))
    return fn(a)


def map_arg(a: Any, fn: Callable[["Node"], Any]) -> Any:
    """Apply ``fn`` to every Node inside ``a``; other leaves are kept."""
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


def _freeze(a: Any) -> Any:
    """Nested args with lists/dicts made immutable."""
    if isinstance(a, tuple):
        frozen = [_freeze(elem) for elem in a]
        return type(a)(*frozen) if hasattr(a, "_fields") else tuple(frozen)
    if isinstance(a, list):
        return ImmutableList(_freeze(elem) for elem in a)
    if isinstance(a, dict):
        return ImmutableDict((key, _freeze(value)) for key, value in a.items())
    if isinstance(a, slice):
        return slice(_freeze(a.start), _freeze(a.stop), _freeze(a.step))
    return a


_PLAIN = frozenset({int, float, bool, str, complex, type(None)})


def _freeze_collect(a: Any, found: Dict["Node", None]) -> Any:
    """``_freeze(a)``, adding every Node inside to ``found``: one walk, flat args inline."""
    cls = type(a)
    if cls is Node:
        found[a] = None
        return a
    if cls is tuple:
        out = []
        for elem in a:
            kind = type(elem)
            if kind is Node:
                found[elem] = None
            elif kind not in _PLAIN:
                elem = _freeze_collect(elem, found)
            out.append(elem)
        return tuple(out)
    if cls in _PLAIN:
        return a
    frozen = _freeze(a)
    _collect_nodes(frozen, found)
    return frozen


def _collect_nodes(a: Any, found: Dict["Node", None]) -> None:
    if isinstance(a, Node):
        found.setdefault(a)
    elif isinstance(a, (tuple, list)):
        for elem in a:
            _collect_nodes(elem, found)
    elif isinstance(a, dict):
        for value in a.values():
            _collect_nodes(value, found)
    elif isinstance(a, slice):
        _collect_nodes(a.start, found)
        _collect_nodes(a.stop, found)
        _collect_nodes(a.step, found)


def op_name(node: Any) -> str:
    """The bare op name of a call node: the method's name, or the function's ``__name__``."""
    return node.target if node.op == "call_method" else getattr(node.target, "__name__", "")


def target_name(target: Any) -> str:
    """A short readable name for a node target (for tables, labels, errors)."""
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if qualname is not None:
        if module in (None, "builtins", "_operator"):
            return f"operator.{qualname}" if module == "_operator" else qualname
        return f"{module}.{qualname}"
    for attr in ("_qualname", "qualname", "name", "_name"):
        value = getattr(target, attr, None)
        if isinstance(value, str):
            return value
    return type(target).__name__


class Node:
    """One operation: ``op``, ``target``, ``args``, ``kwargs``, ``users``, ``meta``.

    Build nodes through ``Graph`` builders (``graph.call_function(...)``), not
    directly. ``users`` maps every node that reads this one to ``None``.

    >>> from tensorplay_graph.ir import Graph
    >>> import operator
    >>> g = Graph(); x = g.placeholder("x")
    >>> y = g.call_function(operator.add, (x, 1))
    >>> list(x.users)
    [add]
    """

    def __init__(self, graph: "Graph", name: str, op: str, target: Any,
                 args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        if op not in OPCODES and op != "root":
            raise ValueError(f"node {name!r}: unknown op {op!r}; use one of {OPCODES}")
        if op == "call_function" and not callable(target):
            raise ValueError(f"node {name!r}: call_function target {target!r} is not callable; "
                             "pass the function object itself")
        if op in ("call_method", "get_attr", "placeholder") and not isinstance(target, str):
            raise ValueError(f"node {name!r}: {op} target must be a string, got {target!r}")
        self.graph = graph
        self._name = name
        self._op = op
        self._target = target
        self.users: Dict[Node, None] = {}
        self.meta: Dict[str, Any] = {}
        self._prev: Node = self
        self._next: Node = self
        self._erased = False
        # _update_args_kwargs for a node nothing reads yet (one per captured op); inserting
        # the node is what changes the graph.
        found: Dict[Node, None] = {}
        self._args: Tuple[Any, ...] = _freeze_collect(
            args if type(args) is tuple else tuple(args), found)
        self._kwargs: Dict[str, Any] = _freeze_collect(dict(kwargs), found) if kwargs \
            else _NO_KWARGS
        self._input_nodes: Dict[Node, None] = found
        for new in found:
            new.users[self] = None

    # -- identity -------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, candidate: str) -> None:
        self.graph._rename(self, candidate)

    @property
    def op(self) -> str:
        return self._op

    @op.setter
    def op(self, value: str) -> None:
        if value not in OPCODES:
            raise ValueError(f"node {self._name}: unknown op {value!r}; use one of {OPCODES}")
        self._op = value
        self.graph._mutated()

    @property
    def target(self) -> Any:
        return self._target

    @target.setter
    def target(self, value: Any) -> None:
        self._target = value
        self.graph._mutated()

    @property
    def stack_trace(self) -> Optional[str]:
        """The user's source line recorded by capture (``meta["stack"]``)."""
        return self.meta.get("stack")

    # -- list neighbours --------------------------------------------------------
    @property
    def prev(self) -> "Node":
        return self._prev

    @property
    def next(self) -> "Node":
        return self._next

    def prepend(self, x: "Node") -> None:
        """Move ``x`` (of the same graph) to just before this node."""
        if x is self:
            return
        if x.graph is not self.graph:
            raise ValueError(f"cannot move node {x} of another graph before {self}")
        x._unlink()
        prev = self._prev
        prev._next, x._prev, x._next, self._prev = x, prev, self, x
        self.graph._mutated()

    def append(self, x: "Node") -> None:
        """Move ``x`` (of the same graph) to just after this node."""
        self._next.prepend(x)

    def _unlink(self) -> None:
        # Erased nodes keep their own pointers so iteration over a list being
        # edited can continue past them.
        prev, nxt = self._prev, self._next
        prev._next, nxt._prev = nxt, prev

    # -- args / kwargs ----------------------------------------------------------
    @property
    def args(self) -> Tuple[Any, ...]:
        return self._args

    @args.setter
    def args(self, value: Tuple[Any, ...]) -> None:
        self._update_args_kwargs(value, self._kwargs)

    @property
    def kwargs(self) -> Dict[str, Any]:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value: Dict[str, Any]) -> None:
        self._update_args_kwargs(self._args, value)

    @property
    def all_input_nodes(self) -> List["Node"]:
        """Every distinct Node read by ``args``/``kwargs``, in first-use order."""
        return list(self._input_nodes)

    def update_arg(self, idx: int, arg: Any) -> None:
        """Replace positional argument ``idx``."""
        args = list(self._args)
        args[idx] = arg
        self.args = tuple(args)

    def update_kwarg(self, key: str, arg: Any) -> None:
        """Set keyword argument ``key``."""
        kwargs = dict(self._kwargs)
        kwargs[key] = arg
        self.kwargs = kwargs

    def _update_args_kwargs(self, args: Any, kwargs: Any) -> None:
        found: Dict[Node, None] = {}
        new_args = _freeze_collect(args if type(args) is tuple else tuple(args), found)
        new_kwargs = _freeze_collect(dict(kwargs), found) if kwargs else _NO_KWARGS
        for old in self._input_nodes:
            if old not in found:
                old.users.pop(self, None)
        for new in found:
            new.users[self] = None
        self._args, self._kwargs, self._input_nodes = new_args, new_kwargs, found
        if self._op != "root":
            self.graph._mutated()

    # -- rewiring ---------------------------------------------------------------
    def replace_all_uses_with(self, replace_with: Any,
                              delete_user_cb: Callable[["Node"], bool] = lambda user: True,
                              *, propagate_meta: bool = False) -> List["Node"]:
        """Make every user read ``replace_with`` instead of this node.

        Returns the users that changed. ``delete_user_cb(user)`` returning False
        keeps that user on this node.
        """
        if propagate_meta and isinstance(replace_with, Node):
            for key, value in self.meta.items():
                replace_with.meta.setdefault(key, value)
        changed = []
        for user in list(self.users):
            if user is replace_with or not delete_user_cb(user):
                continue
            user.replace_input_with(self, replace_with)
            changed.append(user)
        return changed

    def replace_input_with(self, old_input: "Node", new_input: Any) -> None:
        """Replace every occurrence of ``old_input`` in this node's args/kwargs."""
        def swap(n: Node) -> Any:
            return new_input if n is old_input else n
        self._update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    # -- printing ---------------------------------------------------------------
    def format_node(self) -> str:
        """fx-style one-line description: ``%add : [num_users=1] = call_function[...]``."""
        if self._op == "output":
            return f"return {_format_arg(self._args[0] if self._args else None)}"
        return (f"%{self._name} : [num_users={len(self.users)}] = "
                f"{self._op}[target={target_name(self._target)}]"
                f"(args = {_format_arg(self._args)}, kwargs = {_format_arg(self._kwargs)})")

    def __repr__(self) -> str:
        return self._name

    def is_impure(self) -> bool:
        """True when dead-code elimination must keep this node (see :mod:`.effects`)."""
        from .effects import is_impure
        return is_impure(self)


def _format_arg(a: Any) -> str:
    if isinstance(a, Node):
        return f"%{a.name}"
    if isinstance(a, tuple):
        body = ", ".join(_format_arg(x) for x in a)
        return f"({body},)" if len(a) == 1 else f"({body})"
    if isinstance(a, list):
        return "[" + ", ".join(_format_arg(x) for x in a) + "]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k!r}: {_format_arg(v)}" for k, v in a.items()) + "}"
    if isinstance(a, slice):
        return f"slice({_format_arg(a.start)}, {_format_arg(a.stop)}, {_format_arg(a.step)})"
    if callable(a) and not isinstance(a, type):
        return target_name(a)
    text = repr(a)
    if text.startswith("<"):  # enum members (<DType.undefined: 22>) read better as str()
        plain = str(a)
        return plain if plain and not plain.startswith("<") and len(plain) <= 60 else text
    return text
