"""Plain Python objects a captured program reads tensors from or writes into.

A call may pass plain objects (transformers' ``DynamicCache``, a user's ``Box``) besides
tensors and containers, and a function may read objects from its globals. Capture keys such
an argument by identity and bakes what the program reads from it into the graph: right for a
flag or a size, wrong for a tensor -- a tensor reached through an object's attribute is the
caller's state, which the caller may replace or write between calls, yet the graph would
read its capture-time value. Writes are no better: the graph cannot replay a Python side
effect (``cache.update`` appending this call's keys), and a traced value stored into the
object would reach the caller as a placeholder.

:class:`ObjectState` walks, before the trace, the arguments and the program's state: the
globals and closure cells of the function, of its submodules' ``forward`` and of the user's
functions they name, in any module of the user's code (:mod:`.user_code`), their classes'
list / dict attributes, the functions' own attributes, and every module attribute but the
framework's own tables. It keeps a shallow copy of each container it enters; it does not
enter the standard library's own objects (a ``logging.Logger`` fills its level cache as the
program logs: that is no write of the program's).

- Reading a tensor held by a plain object or a module's list / dict, or changing an
  argument object or any list / dict of that state, ends the capture with
  :class:`ObjectStateError`, a graph break (the framework's own frontend follows attribute
  reads and writes with guards); what the trace changed is put back.
- What stays captured is guarded (:meth:`ObjectState.scalar_guards`): every binding the
  program names and every entry on the way to a global-held tensor it read, by identity;
  the numbers, flags and strings of every plain object, list and dict walked, by value
  (``model.config.output_hidden_states = True`` after a capture captures again); the
  length or keys of each list and dict (its length only past :data:`LARGE` entries).

Objects of the frameworks themselves (modules, devices, generators) are not entered: module
state is read through ``get_attr`` nodes.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..frameworks import is_tensor
from .host_random import is_generator
from .guards import VALUE, AttrKeys, Guard, ListEntries, ValueGuard
from .proxy import GraphBreakError
from .state import _global_names, is_module
from .structure import FRAMEWORK_PACKAGES, SCALARS as _SCALARS, is_framework_object
from .user_code import is_stdlib_machinery, is_user_function, is_user_module, submodule_forwards

#: How deep and how many values the walk visits (a KV cache: cache.layers[i].keys is 3 deep)
DEPTH, LIMIT = 6, 5000
#: a list or dict with more entries is guarded by its length, not its values: guards run on
#: every call (a 50,000-entry vocabulary by value: 2 ms a call). Dynamo guards only the
#: entries a program reads; our capture does not see a program's Python reads.
LARGE = 256
#: the guards of the way from a global / closure binding to a value, outermost first
Chain = Tuple[Guard, ...]
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType)


class ObjectStateError(GraphBreakError):
    """The program reads a tensor through a plain object's attribute, or changes one of an
    argument object's attributes: state a captured graph cannot follow. Dynamo follows both
    (guards, side-effect replay); ``tp.compile`` specialises them as our capture did, so
    TensorPlay programs run eagerly (``eager_for_tensorplay``)."""

    eager_for_tensorplay = True


class ObjectState:
    """What plain objects hold before a trace (see the module docstring)."""

    def __init__(self, arguments: Iterable[Tuple[str, Any]],
                 globals_: Iterable[Tuple[str, Any, Guard]] = ()) -> None:
        self.tensors: Dict[int, Tuple[str, Any]] = {}  # id -> (path, the tensor: id stays unique)
        #: (path, the list / dict / attribute dict, its shallow copy, "list" / "item" / "attr")
        self._saved: List[Tuple[str, Any, Any, str]] = []
        #: the same for the lists, dicts and plain objects reached from globals and modules:
        #: put back when the trace is abandoned (a plain object's attributes are not checked:
        #: a program may keep numbers there; a stored traced value is ``check_no_escape``'s)
        self._state_saved: List[Tuple[str, Any, Any, str]] = []
        self._seen: set = set()
        self._attrs: List[Dict[str, Any]] = []  # every plain object's __dict__ walked
        #: global / closure state: id(tensor) -> (the tensor, the guards of the way to it)
        self._held: Dict[int, Tuple[Any, Chain]] = {}
        #: every list, dict, tuple (and, as None, plain object) reached from the program's
        #: state, with the guards of the way to it
        self._containers: List[Tuple[Any, Chain]] = []
        self._read_chains: List[Chain] = []
        #: ``(path, generator)``: Python-level random generators reached (``host_random``)
        self.generators: List[Tuple[str, Any]] = []
        self._budget = LIMIT
        for path, value in arguments:
            self._walk(value, path, DEPTH, inside=False, save=True)
        #: every global and closure binding the program names, by identity: a value the walk
        #: does not enter (a dtype, a numpy array or scalar) rebound must capture again
        self._bindings: List[Guard] = []
        for path, value, link in globals_:
            # a tensor in a module's list / dict is state too (in a function's global or
            # closure container it is a constant: the tensor itself, its way guarded)
            self._walk(value, path, DEPTH, inside=path.startswith("self."), save=False,
                       chain=(link,))
            if link is not None and not path.startswith("self."):
                self._bindings.append(link)

    def _walk(self, value: Any, path: str, depth: int, inside: bool, save: bool,
              chain: Optional[Chain] = None) -> None:
        if is_tensor(value):
            if inside:
                self.tensors.setdefault(id(value), (path, value))
            elif chain is not None:
                self._held.setdefault(id(value), (value, chain))
            return
        if is_generator(value):
            self.generators.append((path, value))
            return
        if depth <= 0 or self._budget <= 0 or isinstance(value, _SCALARS + _OPAQUE) or \
                id(value) in self._seen or is_framework_object(value) or is_module(value):
            return
        self._seen.add(id(value))
        self._budget -= 1

        def below(holder: Any, key: Any, item: Any) -> Optional[Chain]:
            # the guards of the way to ``item``: a list / dict entry or attribute replaced
            # since the capture must capture again (a tuple's entries cannot be)
            if chain is None or holder is None:
                return chain
            return chain + ((holder, key, item),)

        if isinstance(value, (tuple, list)):
            if isinstance(value, list) and (save or chain is not None):
                (self._saved if save else self._state_saved).append(
                    (path, value, list(value), "list"))
            entries = ListEntries(value) if isinstance(value, list) else None
            self._note_container(value, chain)
            for i, item in enumerate(value):
                self._walk(item, f"{path}[{i}]", depth - 1, inside, save, below(entries, i, item))
        elif isinstance(value, dict):
            if save or chain is not None:
                (self._saved if save else self._state_saved).append(
                    (path, value, dict(value), "item"))
            self._note_container(value, chain)
            for key, item in list(value.items()):
                self._walk(item, f"{path}[{key!r}]", depth - 1, inside, save,
                           below(value, key, item))
        elif dataclasses.is_dataclass(value) and save and not inside:
            # a dataclass argument is flattened like a container (structure.value_key)
            for field in dataclasses.fields(value):
                self._walk(getattr(value, field.name, None), f"{path}.{field.name}",
                           depth - 1, inside, save)
        elif not is_stdlib_machinery(value):
            attrs = getattr(value, "__dict__", None)
            if isinstance(attrs, dict):
                self._attrs.append(attrs)
                if save or chain is not None:
                    (self._saved if save else self._state_saved).append(
                        (path, attrs, dict(attrs), "attr"))
                if chain is not None:
                    self._containers.append((None, chain))  # its scalars: _attrs
                for key, item in list(attrs.items()):
                    self._walk(item, f"{path}.{key}", depth - 1, True, save,
                               below(attrs, key, item))

    def _note_container(self, container: Any, chain: Optional[Chain]) -> None:
        # every list / dict reached from the program's state: its way, its length or keys
        # (``for s in SIZES`` reads an appended entry) and its numbers are guarded
        if chain is not None:
            self._containers.append((container, chain))

    def scalar_guards(self) -> List[Guard]:
        """After the trace: guards on the numbers, flags and strings of every plain object
        walked (a model's ``config.output_hidden_states``, an argument's ``box.scale``) and
        of the lists and dicts reached through the program's globals and closure variables
        (``CFG["scale"]``), as ``capture.guards.AttrKeys`` guards: a value changed since
        captures again. Also the identity of every entry on the way to those containers and
        to each global-held tensor the trace read (``CACHE["w"] = new`` captures again)."""
        guards: List[Guard] = []
        for attrs in self._attrs:
            keys = AttrKeys.scalars(attrs)
            if keys:
                guards.append((attrs, keys, keys.values(attrs)))
        for container, _ in self._containers:
            if container is None or isinstance(container, tuple):
                continue
            if len(container) > LARGE:  # checked per call: its length only (a known limit)
                shape = ValueGuard(functools.partial(len, container),
                                   "the length of a large list or dict the program reads")
            else:
                keys = AttrKeys.scalars(container)
                if keys:
                    guards.append((container, keys, keys.values(container)))
                shape = ValueGuard(functools.partial(_entries, container),
                                   "the length or keys of a list or dict the program reads")
            guards.append((shape, VALUE, None))
        seen = set()
        for chain in [c for _, c in self._containers] + self._read_chains + [self._bindings]:
            for link in chain:
                if link is not None and (id(link[0]), link[1]) not in seen:
                    seen.add((id(link[0]), link[1]))
                    guards.append(link)
        return guards

    def read(self, tensor: Any) -> None:
        """Raise :class:`ObjectStateError` if ``tensor`` was reached through a plain object."""
        held = self._held.get(id(tensor))
        if held is not None and held[0] is tensor:
            self._read_chains.append(held[1])
        found = self.tensors.get(id(tensor))
        if found is not None and found[1] is tensor:
            raise ObjectStateError(
                f"the program reads tensor {found[0]}, held by a plain object or a module's "
                "list or dict: the caller's state, which a captured graph would read as it was "
                "at capture. "
                "tensorplay_graph.compile hands such programs to the framework's frontend (a "
                "graph break); to keep our capture, pass the tensor as an argument")

    def changed(self) -> Optional[str]:
        """The first argument object attribute (or list / dict entry), or entry of a list or
        dict reached from the program's globals or modules, the trace changed."""
        state = [entry for entry in self._state_saved if entry[3] in ("list", "item")]
        for path, holder, saved, kind in self._saved + state:
            if kind == "list":
                index = next((i for i, (a, b) in enumerate(zip(holder, saved)) if a is not b),
                             None if len(holder) == len(saved) else min(len(holder), len(saved)))
                if index is not None:
                    return f"{path}[{index}]"
                continue
            keys = holder.keys() ^ saved.keys()
            key = next(iter(keys), None)
            if key is None:
                key = next((k for k, item in saved.items() if holder[k] is not item), None)
            if key is not None:
                return f"{path}.{key}" if kind == "attr" else f"{path}[{key!r}]"
        return None

    def restore(self) -> None:
        """Put back every saved attribute, list and dict as it was before the trace (an
        abandoned trace: the framework's frontend or eager runs the program again)."""
        for _, holder, saved, kind in self._saved + self._state_saved:
            if kind == "list":
                holder[:] = saved
            else:
                holder.clear()
                holder.update(saved)

    def check_unchanged(self) -> None:
        """Raise :class:`ObjectStateError` (after restoring) if the trace changed an
        argument object."""
        where = self.changed()
        if where is not None:
            self.restore()
            raise ObjectStateError(
                f"the program changes {where}, state of an object passed as an argument or "
                "held by its globals or modules: a captured graph cannot repeat that write on "
                "later calls. tensorplay_graph."
                "compile hands such programs to the framework's frontend (a graph break), "
                "which replays it; to keep our capture, return the new value instead")


def argument_roots(args: tuple, kwargs: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """A call's arguments as ``(path, value)`` walk roots."""
    return [(f"argument {i}", value) for i, value in enumerate(args)] + \
        [(f"argument {name!r}", value) for name, value in kwargs.items()]


@functools.lru_cache(maxsize=None)
def _module_internals(cls: type) -> frozenset:
    """The attributes the framework's own ``Module.__init__`` sets (parameter, buffer,
    submodule and hook tables: read through ``get_attr`` nodes and hook guards, not walked);
    a module's other attributes, private ones included (``self._cfg``), are its user's."""
    for base in cls.__mro__:
        if base.__name__ == "Module" and base.__module__.split(".")[0] in FRAMEWORK_PACKAGES:
            try:
                return frozenset(vars(base()))
            except Exception:  # noqa: BLE001 - cannot build it: walk no private name
                break
    return _PRIVATE


class _Private(frozenset):
    """Every name starting with an underscore (when the framework's Module cannot be built)."""

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.startswith("_")


_PRIVATE = _Private()
_ABSENT = object()


def _entries(container: Any) -> Any:
    return len(container) if isinstance(container, list) else tuple(container)


def class_state(value: Any, scope: Dict[str, Any]) -> List[Tuple[str, Any, Guard]]:
    """The lists and dicts a class of the program's own module keeps as class attributes
    (``class Registry: items = []``), each with the guard of its binding: state like a
    global's."""
    if not isinstance(value, type) or value.__module__ != scope.get("__name__"):
        return []
    attrs = vars(value)  # a live view: its .get reads the class's current attribute
    return [(key, item, (attrs, key, item)) for key, item in list(attrs.items())
            if isinstance(item, (list, dict)) and not key.startswith("__")]


def global_roots(function: Any, root: Any = None) -> Iterable[Tuple[str, Any, Guard]]:
    """The globals the function's code names, its closure variables and the plain objects
    the root module's modules hold (``self.holder``; reads only), each with the guard of its
    binding (``(namespace, name, value)``, a cell's ``(cell, None, value)``)."""
    for path, value, link in module_roots(root):
        if not isinstance(value, _SCALARS) and not is_tensor(value) and \
                not is_framework_object(value) and not is_module(value):
            yield path, value, link
    yield from function_roots(function, list(submodule_forwards(root)))


def module_roots(root: Any, internal: bool = False) -> Iterable[Tuple[str, Any, Guard]]:
    """Every attribute of every module of ``root`` (with ``internal``, the framework's own
    tables too), with the guard of its binding."""
    modules = root.named_modules() if callable(getattr(root, "named_modules", None)) else ()
    for qualname, module in modules:
        attrs, skip = vars(module), () if internal else _module_internals(type(module))
        for key, value in list(attrs.items()):
            if key not in skip:
                yield f"self.{qualname + '.' if qualname else ''}{key}", value, (attrs, key, value)


def function_roots(function: Any, more: Iterable[Any] = ()) -> Iterable[Tuple[str, Any, Guard]]:
    """The globals ``function`` (and the functions ``more``: submodules' ``forward``) read,
    and those of the user's functions they name, in their own module or another module of
    the user's (:mod:`.user_code`), directly or as ``module.name``; their class attributes'
    lists and dicts, closure variables and the functions' own attributes."""
    todo, seen, yielded = [function, *more], set(), set()
    while todo:
        current = todo.pop()
        code = getattr(current, "__code__", None)
        if code is None or id(current) in seen:
            continue
        seen.add(id(current))
        scope = current.__globals__
        attrs = getattr(getattr(current, "__func__", current), "__dict__", None)
        if attrs is not None:  # ``f.calls += 1``: the function object's own attributes
            yield f"attributes of {current.__qualname__}", attrs, None
        names = _global_names(code)
        yield from _named(scope, names, "global {}".format, yielded, todo)
        for name, cell in zip(code.co_freevars, current.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if is_user_function(value):
                todo.append(value)
            yield f"closure variable {name}", value, (cell, None, value)
            yield from _module_attributes(value, f"closure variable {name}", names, yielded,
                                          todo)


def _named(namespace: Dict[str, Any], names: List[str], label: Any, yielded: set,
           todo: List[Any]) -> Iterable[Tuple[str, Any, Guard]]:
    """The values of ``names`` in ``namespace`` (a globals dict, a user module's), each with
    the guard of its binding, the lists and dicts of the classes among them, and what a user
    module among them holds under those names (``utils.SCALE``: ``co_names`` hold attribute
    names too); the user's functions among them join ``todo``. ``label(name)``: the path."""
    for name in names:
        value = namespace.get(name, _ABSENT)
        if value is _ABSENT or (id(namespace), name) in yielded:
            continue
        yielded.add((id(namespace), name))
        if isinstance(value, types.FunctionType) and (value.__globals__ is namespace or
                                                      is_user_function(value)):
            todo.append(value)
        yield label(name), value, (namespace, name, value)
        for key, item, link in class_state(value, namespace):
            yield f"{label(name)}.{key}", item, link
        yield from _module_attributes(value, label(name), names, yielded, todo)


def _module_attributes(module: Any, path: str, names: List[str], yielded: set,
                       todo: List[Any]) -> Iterable[Tuple[str, Any, Guard]]:
    """What a user's ``module`` (the value of ``path``) holds under ``names``."""
    if is_user_module(module):
        yield from _named(vars(module), names, (path + ".{}").format, yielded, todo)
