"""Program state read at call time: parameters, buffers, global and closure tensors.

A captured graph must never freeze what the caller can change between calls.
While a trace runs:

- every parameter and buffer of every module the program reaches (the root
  module, modules held by closures, globals, default arguments or bound
  methods, and any module *called* during the trace) reads as a ``get_attr``
  proxy, so expressions over parameters are recorded, not computed once;
- tensors held by the function's globals, closure cells and defaults read as
  ``get_attr`` proxies too, through a copy of the function (its globals dict
  and cells are never written: other threads keep seeing the real values).

- a module's plain tensor attributes (``self.t = torch.ones(3)``, not a buffer) read
  the same way.

Each such read is also a :class:`Guard`: the container it came from (a
module's ``_parameters``, a globals dict, a cell) must still hold the same
object on the next call, else ``CompiledFunction`` captures again (torch.compile
guards the same things). In-place updates (``weight.add_``, optimizer steps)
need no guard: the graph reads the very tensor. Every patched module's plain
numbers, flags and strings are guarded too (:class:`AttrKeys`: ``model.train()``
after a capture captures again); one the program itself changes is a graph break.
Tensors held by plain objects are :mod:`.object_state`'s.

Limits: a module's ``__dict__`` is patched while its forward runs under the
trace (as torch.fx does), visible to other threads using the same module
object meanwhile. Tensors in the globals of functions from other modules are read as
constants of the graph (by reference: in-place writes are seen); their bindings are
:mod:`.object_state`'s guards, for the user's code (:mod:`.user_code`).
"""

from __future__ import annotations

import functools
import types
from contextlib import ExitStack
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..frameworks import adapter_for, is_tensor
from .guards import HOOKS, VALUE, AttrKeys, Guard, HookGuard, ValueGuard, _cell_value
from .proxy import MISSING
from .structure import SCALARS as _SCALARS



def is_module(value: Any) -> bool:
    """A TensorPlay or torch ``nn.Module`` (duck-typed: no framework import)."""
    return (not isinstance(value, type) and callable(getattr(value, "forward", None))
            and callable(getattr(value, "named_modules", None)))


def _only_state_proxies(value: Any, depth: int = 3) -> bool:
    """True for a proxy of parameter / buffer state (get_attr), or a container of such proxies
    and ``None``s holding at least one."""
    from .proxy import Proxy
    found: List[Any] = []

    def walk(item: Any, level: int) -> bool:
        if isinstance(item, Proxy):
            found.append(item)
            return item.node.op == "get_attr"
        if item is None:
            return True
        if level > 0 and isinstance(item, (list, tuple)):
            return all(walk(x, level - 1) for x in item)
        return False

    return walk(value, depth) and bool(found)


class ProgramState:
    """Patches the state a trace reads and records the guards; one per trace."""

    def __init__(self, tracer: Any, stack: ExitStack) -> None:
        self.tracer = tracer
        self.guards: List[Guard] = []
        self._patched: set = set()
        self._restore: List[Tuple[Any, str, Any]] = []
        self._root_globals: Optional[Dict[str, Any]] = None
        self._rebinding: set = set()
        self._snapshots: List[Tuple[Any, Dict[str, Any]]] = []
        self._tables: List[Tuple[Any, Dict[str, Any]]] = []  # (module, its buffers before)
        self.modules: List[Any] = []  # the patched modules, once the program ran
        stack.callback(self._undo)

    # -- modules ----------------------------------------------------------------------
    def patch_module(self, module: Any, prefix: str) -> None:
        """Every parameter / buffer of ``module`` (and its submodules) as a get_attr proxy."""
        for name, sub in module.named_modules():
            if id(sub) in self._patched:
                continue
            self._patched.add(id(sub))
            self._snapshots.append((sub, dict(sub.__dict__)))
            self._tables.append((sub, dict(getattr(sub, "_buffers", None) or {})))
            owner = f"{prefix}.{name}" if prefix and name else (prefix or name)
            for child_name, child in getattr(sub, "_modules", {}).items():
                self.guards.append((sub._modules, child_name, child))
            for table in ("_parameters", "_buffers"):
                state = getattr(sub, table, None) or {}
                for attr, value in state.items():
                    self.guards.append((state, attr, value))
                    if value is None or not is_tensor(value):
                        continue
                    qualname = f"{owner}.{attr}" if owner else attr
                    proxy = self._proxy(value, qualname)
                    self._restore.append((sub, attr, sub.__dict__.get(attr, MISSING)))
                    sub.__dict__[attr] = proxy
            for attr, value in list(sub.__dict__.items()):
                if is_tensor(value):  # a plain tensor attribute (not a buffer): state as well
                    self.guards.append((sub.__dict__, attr, value))
                    qualname = f"{owner}.{attr}" if owner else attr
                    self._restore.append((sub, attr, value))
                    sub.__dict__[attr] = self._proxy(value, qualname)

    def finish(self) -> None:
        """After the program ran: guard every patched module's plain numbers, flags and
        strings (``training`` among them: ``model.train()`` after a capture must not reuse
        it); one the program itself changed is a side effect the graph cannot repeat."""
        from .object_state import ObjectStateError
        for module, before in self._snapshots:
            attrs = module.__dict__
            keys = AttrKeys.scalars(before)
            changed = next((k for k in keys if attrs.get(k, MISSING) is not before[k] and
                            attrs.get(k, MISSING) != before[k]), None)
            if changed is not None:
                now = attrs.get(changed, MISSING)
                for key in keys:  # the trace's own writes are undone: the frontend runs it again
                    attrs[key] = before[key]
                raise ObjectStateError(
                    f"the program changes attribute {changed!r} of module "
                    f"{type(module).__name__} ({before[changed]!r} -> {now!r}): a captured "
                    "graph cannot repeat that write on later calls. tensorplay_graph.compile "
                    "hands such programs to the framework's frontend (a graph break)")
            if keys:
                self.guards.append((attrs, keys, keys.values(attrs)))
        self.modules = [module for module, _ in self._snapshots]

    def late_guards(self, framework: Optional[str]) -> List[Guard]:
        """Guards made once the trace's context closed (its own module hook gone): the
        :class:`HookGuard` of the patched modules, and the framework's default dtype
        (``torch.ones(3)`` in the program is baked as a constant of that dtype)."""
        guards: List[Guard] = [(HookGuard(self.modules), HOOKS, None)] if self.modules else []
        getter = getattr(adapter_for(framework).module, "get_default_dtype", None) \
            if framework else None
        if getter is not None:
            guards.append((ValueGuard(getter, "the default dtype"), VALUE, None))
        return guards

    def on_module_call(self, module: Any) -> None:
        """A module called during the trace that no scan found: read its state too."""
        if id(module) not in self._patched:
            self.patch_module(module, f"_called{len(self._patched)}")

    def _undo(self) -> None:
        for module, attr, previous in reversed(self._restore):
            if previous is MISSING:
                module.__dict__.pop(attr, None)
            else:
                module.__dict__[attr] = previous
        self._restore.clear()
        # A forward that caches its own state on the module (LSTM's ``self._flat_weights =
        # [self.weight_ih_l0, ...]``) left placeholders there; eager would have left the same
        # parameters, which the module held before the trace, so the old binding comes back.
        for module, before in self._snapshots:
            for attr, value in list(module.__dict__.items()):
                previous = before.get(attr, MISSING)
                if value is not previous and _only_state_proxies(value):
                    if previous is MISSING:
                        del module.__dict__[attr]
                    else:
                        module.__dict__[attr] = previous
        # ``self.steps += 1`` on a buffer stores the in-place result -- the buffer itself in
        # eager -- back into ``_buffers``: the buffer comes back (the graph updates it).
        for module, before in self._tables:
            buffers = getattr(module, "_buffers", None) or {}
            for name, value in list(buffers.items()):
                if name in before and self._own_inplace_result(value, before[name]):
                    buffers[name] = before[name]
        self._tables.clear()

    def restore_modules(self) -> None:
        """Put every patched module's ``__dict__`` back as it was before the trace (an
        abandoned trace: the framework's frontend or eager runs the program again)."""
        for module, before in self._snapshots:
            attrs = module.__dict__
            attrs.clear()
            attrs.update(before)

    def _own_inplace_result(self, value: Any, tensor: Any) -> bool:
        """``value`` is a proxy of in-place ops applied to ``tensor``'s own get_attr."""
        from ..ir.effects import is_inplace
        from .proxy import Proxy
        if not isinstance(value, Proxy) or not is_tensor(tensor):
            return False
        source, node = self.tracer.lifted(tensor), value.node
        while node.op != "get_attr" and is_inplace(node) and node.args:
            node = node.args[0]
        return source is not None and node is source.node

    # -- functions ----------------------------------------------------------------------
    def rebind(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` with the tensors of its globals / cells / defaults read as proxies,
        after patching the modules they hold (the function object itself is not changed)."""
        if isinstance(function, functools.partial):
            inner = self.rebind(function.func)
            return functools.partial(inner, *function.args, **function.keywords)
        if isinstance(function, types.MethodType):
            if is_module(function.__self__):
                self.patch_module(function.__self__, "")
            inner = self.rebind(function.__func__)
            return types.MethodType(inner, function.__self__) if inner is not function.__func__ \
                else function
        if not isinstance(function, types.FunctionType):
            return function
        code, namespace = function.__code__, function.__globals__
        if self._root_globals is None:
            self._root_globals = namespace
            self._rebinding.add(id(function))
        new_globals: Optional[Dict[str, Any]] = None
        for name in _global_names(code):
            value = namespace.get(name, MISSING)
            replacement = self._read(value, f"g_{name}")
            if replacement is MISSING:
                continue
            self.guards.append((namespace, name, value))
            if replacement is not value:
                if new_globals is None:
                    new_globals = dict(namespace)
                new_globals[name] = replacement
        cells = function.__closure__ or ()
        new_cells = []
        for name, cell in zip(code.co_freevars, cells):
            value = _cell_value(cell)
            replacement = self._read(value, f"c_{name}")
            if replacement is not MISSING:
                self.guards.append((cell, None, value))
            new_cells.append(types.CellType(replacement) if replacement is not MISSING
                             and replacement is not value else cell)
        defaults = self._read_all(function.__defaults__ or (), "d")
        changed = (new_globals is not None or any(a is not b for a, b in zip(new_cells, cells))
                   or defaults is not None)
        if not changed:
            return function
        copy = types.FunctionType(code, new_globals if new_globals is not None else namespace,
                                  function.__name__,
                                  defaults if defaults is not None else function.__defaults__,
                                  tuple(new_cells) or None)
        copy.__kwdefaults__ = function.__kwdefaults__
        copy.__dict__.update(function.__dict__)
        return copy

    def _read(self, value: Any, name: str) -> Any:
        """What a trace should see for a captured value: a proxy for a tensor, the module
        itself (patched) for a module, MISSING for values nothing needs to guard."""
        if is_tensor(value):
            return self._proxy(value, name)
        if is_module(value):
            self.patch_module(value, name)
            return value
        if isinstance(value, types.FunctionType) and value.__globals__ is self._root_globals \
                and id(value) not in self._rebinding:
            # The user's own helpers (same module as the program) get the same treatment.
            self._rebinding.add(id(value))
            return self.rebind(value)
        if isinstance(value, _SCALARS):
            return value
        return MISSING

    def _proxy(self, value: Any, name: str) -> Any:
        """The ``get_attr`` proxy of a tensor: one per tensor (tied weights share it)."""
        lifted = self.tracer.lifted(value)  # never ``or``: the truth value of a proxy is data
        return lifted if lifted is not None else self.tracer.attr_proxy(name, value)

    def _read_all(self, values: tuple, prefix: str) -> Optional[tuple]:
        new = tuple(self._proxy(v, f"{prefix}{i}") if is_tensor(v) else v
                    for i, v in enumerate(values))
        for value in values:
            if is_module(value):
                self.patch_module(value, f"{prefix}_module")
        return new if any(a is not b for a, b in zip(new, values)) else None


def _global_names(code: types.CodeType) -> List[str]:
    """Names ``code`` (and the functions and comprehensions defined in it) may read as globals."""
    names: List[str] = []
    seen = set()
    todo = [code]
    while todo:
        current = todo.pop()
        for name in current.co_names:
            if name not in seen:
                seen.add(name)
                names.append(name)
        todo.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return names
