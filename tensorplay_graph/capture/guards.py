"""Guards of a captured program's state: what must still hold for a specialization to run.

A guard is ``(container, key, expected)``: ``container.get(key)`` (a dict) or a cell's
contents (``key`` None) must still be ``expected`` (by identity; scalars by value). Three
other forms check several values at once: :class:`AttrKeys` (a module's or a plain object's
numbers and flags), :class:`HookGuard` (module hooks, key ``HOOKS``) and :class:`ValueGuard`
(a value read through a call, the default dtype, key ``VALUE``). ``fast_call`` inlines them
into each specialization's entry; :func:`guard_fails` describes the first one broken.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

from ..frameworks import adapter_for, framework_of, is_tensor, loaded
from .proxy import MISSING, GraphBreakError
from .structure import SCALARS as _SCALARS

#: ``(container, key, expected)``: ``container`` is a dict or a cell (key ``None``).
Guard = Tuple[Any, Any, Any]


class AttrKeys(tuple):
    """A guard key naming several entries of one module ``__dict__`` (its plain number /
    flag / string attributes, ``training`` among them) or of a list or dict the program
    reads, checked together: the guard's expected value is the tuple of their values."""

    @classmethod
    def scalars(cls, attrs: Any) -> "AttrKeys":
        """The keys (a list's indices) of ``attrs`` holding numbers, flags, strings or None."""
        items = attrs.items() if isinstance(attrs, dict) else enumerate(attrs)
        return cls(k for k, v in items if isinstance(v, _SCALARS))

    def values(self, container: Any) -> tuple:
        if isinstance(container, list):
            return tuple(map(ListEntries(container).get, self))
        return tuple(map(container.get, self))


class ListEntries:
    """A list read like a dict (``get(index, default)``), for ``(container, key, expected)``
    guards on a list's entries: a shorter list reads ``default``."""

    __slots__ = ("items",)

    def __init__(self, items: list) -> None:
        self.items = items

    def get(self, index: int, default: Any = None) -> Any:
        items = self.items
        return items[index] if index < len(items) else default


_HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
#: the key of a :class:`HookGuard` guard: ``(HookGuard, HOOKS, None)``
HOOKS = "forward / backward hooks"


def _module_code(modules: List[Any]) -> List[Any]:
    """The frameworks' Python modules defining the ``Module`` classes of ``modules`` (where
    their global module hooks live: ``torch.nn.modules.module``)."""
    found = []
    for cls in {c for m in modules for c in type(m).__mro__ if c.__name__ == "Module"}:
        for name in loaded():
            adapter = adapter_for(name)
            if adapter.owns(cls.__module__):
                found.append(adapter.loaded_module(cls.__module__))
    return [module for module in found if module is not None]


class ModuleHooksError(GraphBreakError):
    """The compiled module has forward hooks of its own (or global ones): capture traces its
    ``forward``, so Dynamo (torch) or eager (TensorPlay) runs it instead."""

    eager_for_tensorplay = True


def check_root_hooks(root: Any) -> None:
    """Raise :class:`ModuleHooksError` when calling ``root`` runs forward hooks around it."""
    tables = [getattr(root, name, None) for name in ("_forward_hooks", "_forward_pre_hooks")]
    tables += [getattr(module, f"_global{name}", None) for module in _module_code([root])
               for name in ("_forward_hooks", "_forward_pre_hooks")]
    if any(isinstance(t, dict) and t for t in tables):
        raise ModuleHooksError(
            f"{type(root).__name__} has forward (pre-)hooks registered on it, or global module "
            "hooks: tensorplay_graph.compile(module) traces its forward, which its hooks wrap. "
            "The program goes to the framework's frontend (Dynamo) or runs eagerly "
            "(TensorPlay); hooks of its submodules are traced as they are")


class HookGuard:
    """The forward / backward hooks of every patched module and the framework's global ones,
    as at capture (a capture runs the hooks then present): one added or removed since makes
    the program capture again. Checked as the tables' sizes, and the hook ids of the tables
    that held hooks."""

    __slots__ = ("tables", "lengths", "keys")

    def __init__(self, modules: List[Any]) -> None:
        tables = [getattr(m, name) for m in modules for name in _HOOK_TABLES]
        tables += [getattr(module, f"_global{name}", None) for module in _module_code(modules)
                   for name in _HOOK_TABLES]
        self.tables = tuple(t for t in tables if isinstance(t, dict))
        self.lengths = tuple(map(len, self.tables))
        self.keys = tuple((i, tuple(t)) for i, t in enumerate(self.tables) if t)

    def holds(self) -> bool:
        tables = self.tables
        if not self.keys:  # no hooks at capture (the common case): one C-level pass
            return not any(tables)
        return tuple(map(len, tables)) == self.lengths and \
            all(tuple(tables[i]) == keys for i, keys in self.keys)


#: the key of a :class:`ValueGuard` guard: ``(ValueGuard, VALUE, None)``
VALUE = "a value read through a call"


class ValueGuard:
    """A value the program depended on that no dict or cell holds (the framework's default
    dtype): ``read()`` must still return what it returned at capture."""

    __slots__ = ("read", "expected", "what")

    def __init__(self, read: Callable[[], Any], what: str) -> None:
        self.read, self.expected, self.what = read, read(), what


def tensor_layouts(guards: List[Guard]) -> List[Guard]:
    """A guard on the dtype, device, shape and strides of every tensor the other guards hold
    by identity (parameters, buffers, tensors in globals): ``model.half()``, ``model.to()``
    and ``p.data = other`` keep each parameter object, and a graph planned for the old dtype
    or shape must not run on the new one. One native check for torch (Dynamo's
    ``TensorGuards``, as for the arguments), else the layouts compared as tuples."""
    tensors, seen = [], set()
    for _, key, expected in guards:
        if isinstance(key, (str, int)) or key is None:
            if is_tensor(expected) and id(expected) not in seen:
                seen.add(id(expected))
                tensors.append(expected)
    if not tensors:
        return []
    frameworks = {framework_of(t) for t in tensors}
    checker = adapter_for(frameworks.pop()).tensor_guards() if len(frameworks) == 1 else None
    if checker is not None:
        check = checker(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
        read = functools.partial(check, *tensors)
    else:
        read = functools.partial(_layouts, tuple(tensors))
    return [(ValueGuard(read, "the dtype, device, shape or strides of a parameter, buffer or "
                              "tensor the program reads from its state"), VALUE, None)]


def _layouts(tensors: Tuple[Any, ...]) -> tuple:
    # TensorPlay's getters cost 0.1-0.2 us each: what a planned graph depends on, no more
    return tuple((t.dtype, t.device, t.shape, t.stride()) for t in tensors)


def unique(guards: List[Guard]) -> List[Guard]:
    """``guards`` without repeats: a global the program reads is guarded by the capture's
    rebinding and by the state walk alike, and each guard runs on every call."""
    seen, kept = set(), []
    for guard in guards:
        container, key, _ = guard
        mark = (id(container), key) if key is None or isinstance(key, (str, int)) else id(guard)
        if mark not in seen:
            seen.add(mark)
            kept.append(guard)
    return kept


def guard_fails(guards: List[Guard]) -> Optional[str]:
    """The first guard that no longer holds, described; ``None`` if all hold."""
    for container, key, expected in guards:
        if key is HOOKS:
            if not container.holds():
                return "a module's forward / backward hooks changed"
            continue
        if key is VALUE:
            now = container.read()
            if now != container.expected:
                return f"{container.what} changed ({container.expected} -> {now})"
            continue
        if isinstance(key, AttrKeys):
            current = key.values(container)
            if current != expected:
                changed, now, was = next(c for c in zip(key, current, expected) if c[1] != c[2])
                return f"attribute or entry {changed!r} changed (was {_short(was)}, " \
                       f"now {_short(now)})"
            continue
        current = container.get(key, MISSING) if key is not None else _cell_value(container)
        if current is expected:
            continue
        if isinstance(expected, _SCALARS) and type(current) is type(expected) and current == expected:
            continue
        what = f"{key!r}" if key is not None else "a closure variable"
        return f"{what} now holds another object (was {_short(expected)}, now {_short(current)})"
    return None


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


def _short(value: Any) -> str:
    if is_tensor(value):
        return f"a tensor of shape {tuple(value.shape)} at {id(value):#x}"
    return f"{type(value).__name__} at {id(value):#x}" if not isinstance(value, _SCALARS) \
        else repr(value)
