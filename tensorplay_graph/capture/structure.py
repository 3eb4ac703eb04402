"""Calls and results as flat tensor lists plus a structure (a small pytree).

``tensorplay_graph.compile`` passes the caller's ``args`` / ``kwargs`` exactly
as given; the captured graph takes the tensors among them, flattened in a
fixed order, as its placeholders. :func:`call_key` walks a call once, collecting
those tensors and a hashable key (the structure, every non-tensor value, each
tensor's shape / dtype / device / stride / requires_grad) that selects the
specialization. Results go the other way: the graph returns plain nested
tuples / lists / dicts and :func:`output_spec` / :func:`restore` give them back
their types (named tuples, dataclasses, transformers ``ModelOutput``).

>>> leaves = []; key = call_key((x, [y, 2]), {"mask": None}, leaves)   # doctest: +SKIP
>>> leaves == [x, y]                                                    # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..frameworks import framework_of

#: Values keyed (and baked into the capture) by value.
SCALARS = (bool, int, float, complex, str, bytes, type(None))
#: Top-level packages of the frameworks whose objects (tensors, modules, dtypes, devices)
#: never hold our proxies or a program's plain state.
FRAMEWORK_PACKAGES = ("torch", "tensorplay")


def is_framework_object(value: Any) -> bool:
    """Whether ``value``'s type comes from torch or TensorPlay."""
    return type(value).__module__.split(".")[0] in FRAMEWORK_PACKAGES
#: Field order of a tensor's key after ``("tensor", framework, ...)``.
TENSOR_FIELDS = ("shape", "dtype", "device", "stride", "requires_grad")

# type -> framework name (or None): one dict hit per value on the call path.
_FRAMEWORK_OF_TYPE: Dict[type, Optional[str]] = {}


def framework_of_type(value: Any) -> Optional[str]:
    """``framework_of(value)``, cached per type."""
    cls = type(value)
    try:
        return _FRAMEWORK_OF_TYPE[cls]
    except KeyError:
        framework = framework_of(value)
        if framework is not None or cls.__module__.split(".")[0] not in ("tensorplay", "torch"):
            # Only cache negatives for types no framework can claim later on import.
            _FRAMEWORK_OF_TYPE[cls] = framework
        return framework


def tensor_key(value: Any, framework: str) -> Tuple:
    """Key of one tensor: the framework's own hashable shape, dtype and device objects."""
    return ("tensor", framework, value.shape, value.dtype, value.device, value.stride(),
            value.requires_grad)


def is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def is_dataclass_instance(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def value_key(value: Any, leaves: List[Any]) -> Any:
    """Key of one value; appends the tensors inside it to ``leaves`` in key order."""
    framework = framework_of_type(value)
    if framework is not None:
        leaves.append(value)
        return tensor_key(value, framework)
    if isinstance(value, SCALARS):
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        kind = type(value) if is_namedtuple(value) else type(value).__name__
        return (kind, tuple([value_key(item, leaves) for item in value]))
    if is_dataclass_instance(value):
        fields = dataclasses.fields(value)
        return (type(value), tuple([(f.name, value_key(getattr(value, f.name), leaves))
                                    for f in fields]))
    if isinstance(value, dict):
        return ("dict", tuple([(k, value_key(v, leaves)) for k, v in value.items()]))
    # Any other object is baked into the capture as a constant: key on identity.
    return ("object", type(value).__qualname__, ObjectIdentity(value))


class ObjectIdentity:
    """Key of a plain object: equal only to a key of the same live object. A new object
    at a freed one's address is another key, so a specialization never serves it with what
    it baked from the old one."""

    __slots__ = ("_ref", "_id", "_name")

    def __init__(self, value: Any) -> None:
        self._id, self._name = id(value), type(value).__qualname__
        try:
            self._ref = weakref.ref(value)
        except TypeError:  # no weak references (``__slots__``): keep it, so its id stays unique
            self._ref = lambda value=value: value

    def __hash__(self) -> int:
        return self._id

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, ObjectIdentity) or other._id != self._id:
            return False
        mine = self._ref()
        return mine is not None and mine is other._ref()

    def __repr__(self) -> str:
        return f"<{self._name} object at {self._id:#x}>"


def call_key(args: tuple, kwargs: Dict[str, Any], leaves: List[Any]) -> Tuple:
    """Key of a whole call; the tensors of ``args`` then ``kwargs`` go to ``leaves``."""
    key = tuple([value_key(arg, leaves) for arg in args])
    if kwargs:
        key += (("kwargs", tuple([(name, value_key(v, leaves)) for name, v in kwargs.items()])),)
    return key


def replace_tensors(value: Any, new: List[Any], names: Optional[List[str]] = None,
                    path: str = "") -> Any:
    """``value`` with its tensors replaced, in :func:`value_key` order, by ``new.pop()``
    (pass the replacements reversed); ``names`` collects each tensor's path."""
    if framework_of_type(value) is not None:
        if names is not None:
            names.append(path)
        return new.pop()
    if isinstance(value, (tuple, list)):
        items = [replace_tensors(item, new, names, f"{path}_{i}") for i, item in enumerate(value)]
        if is_namedtuple(value):
            return type(value)(*items)
        return items if isinstance(value, list) else tuple(items)
    if is_dataclass_instance(value):
        changes = {f.name: replace_tensors(getattr(value, f.name), new, names, f"{path}_{f.name}")
                   for f in dataclasses.fields(value)}
        return _rebuild_dataclass(type(value), changes)
    if isinstance(value, dict):
        return {k: replace_tensors(v, new, names, f"{path}_{k}") for k, v in value.items()}
    return value


def bind_structure(args: tuple, kwargs: Dict[str, Any], new: List[Any],
                   arg_names: List[str]) -> Tuple[tuple, Dict[str, Any], List[str]]:
    """``(args, kwargs)`` with their tensors replaced by ``new`` (in leaf order), and the
    leaves' names (``input_ids``, ``past_0_1``), for placeholders."""
    stack = list(reversed(new))
    names: List[str] = []
    new_args = tuple(replace_tensors(arg, stack, names,
                                     arg_names[i] if i < len(arg_names) else f"arg{i}")
                     for i, arg in enumerate(args))
    new_kwargs = {name: replace_tensors(v, stack, names, name) for name, v in kwargs.items()}
    return new_args, new_kwargs, names


# -- outputs --------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """Output structure the graph can return: named tuples -> tuples, dataclasses -> dicts."""
    if isinstance(value, (tuple, list)):
        items = [plain(item) for item in value]
        return items if isinstance(value, list) else tuple(items)
    if is_dataclass_instance(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    traced = _traced_attributes(value)
    if traced:
        return {key: plain(vars(value)[key]) for key in traced}
    return value


def _traced_attributes(value: Any) -> List[str]:
    """Attributes of a plain Python object (transformers' ``DynamicCache`` and its layers)
    that hold traced values; the graph returns those, the rest is kept from capture."""
    from .proxy import Proxy
    if isinstance(value, (Proxy, type)) or framework_of(value) is not None or \
            callable(value) or not hasattr(value, "__dict__"):
        return []
    return [key for key, item in vars(value).items() if _holds_proxy(item, 4)]


def _holds_proxy(value: Any, depth: int) -> bool:
    from .proxy import Proxy
    if isinstance(value, Proxy):
        return True
    if depth <= 0:
        return False
    if isinstance(value, (tuple, list)):
        return any(_holds_proxy(item, depth - 1) for item in value)
    if isinstance(value, dict):
        return any(_holds_proxy(item, depth - 1) for item in value.values())
    return bool(_traced_attributes(value)) if depth > 1 else False


def output_spec(value: Any) -> Any:
    """How to give :func:`plain` output back its types; ``None`` where nothing changes."""
    if isinstance(value, (tuple, list)):
        children = [output_spec(item) for item in value]
        if is_namedtuple(value):
            return ("namedtuple", type(value), children)
        return (type(value).__name__, children) if any(c is not None for c in children) else None
    if is_dataclass_instance(value):
        names = [f.name for f in dataclasses.fields(value)]
        return ("dataclass", type(value), names, [output_spec(getattr(value, n)) for n in names])
    if isinstance(value, dict):
        children = {key: output_spec(item) for key, item in value.items()}
        if type(value) is not dict:
            return ("mapping", type(value), children)
        return ("dict", children) if any(c is not None for c in children.values()) else None
    traced = _traced_attributes(value)
    if traced:
        # every attribute in its order (vars() shows it); the traced ones come from the graph
        kept = {k: _TRACED if k in traced else v for k, v in vars(value).items()}
        return ("object", type(value), kept, {k: output_spec(vars(value)[k]) for k in traced})
    return None


_TRACED = object()  # an attribute of an "object" spec whose value the graph returns


def restore(spec: Any, value: Any) -> Any:
    """Rebuild the typed output from the graph's plain output (see :func:`output_spec`);
    a compiled program resolves the spec once (:func:`restorer`)."""
    return restorer(spec)(value)


def restorer(spec: Any) -> Callable[[Any], Any]:
    """:func:`restore` for one ``spec``, resolved once: the per-call work is the rebuild alone
    (a transformers ``ModelOutput`` with a ``DynamicCache`` took 20 us through :func:`restore`,
    which looks up the spec's kinds and the dataclass's fields again on every call)."""
    if spec is None:
        return _identity
    kind = spec[0]
    if kind in ("namedtuple", "tuple", "list"):
        cls, children = (spec[1], spec[2]) if kind == "namedtuple" else (None, spec[1])
        items = _items(children)
        if kind == "namedtuple":
            return lambda value: cls(*items(value))
        return items if kind == "list" else (lambda value: tuple(items(value)))
    if kind == "dataclass":
        _, cls, names, children = spec
        fields = [(n, restorer(c)) for n, c in zip(names, children)]
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        plain = [(n, f) for n, f in fields if n in init]
        later = [(n, f) for n, f in fields if n not in init]

        def dataclass_value(value: Any) -> Any:
            obj = cls(**{n: f(value[n]) for n, f in plain})
            for name, f in later:
                object.__setattr__(obj, name, f(value[name]))
            return obj
        return dataclass_value
    if kind == "object":
        _, cls, kept, children = spec
        attrs = [(k, restorer(children[k]) if v is _TRACED else None, v) for k, v in kept.items()]

        def object_value(value: Any) -> Any:
            obj = cls.__new__(cls)
            vars(obj).update({k: v if f is None else f(value[k]) for k, f, v in attrs})
            return obj
        return object_value
    entries = [(k, restorer(c)) for k, c in (spec[2] if kind == "mapping" else spec[1]).items()]
    if kind == "mapping":
        cls = spec[1]
        return lambda value: cls({k: f(value[k]) for k, f in entries})
    return lambda value: {k: f(value[k]) for k, f in entries}


def _identity(value: Any) -> Any:
    return value


def _items(children: Sequence[Any]) -> Callable[[Any], List[Any]]:
    fns = [restorer(c) for c in children]
    if all(f is _identity for f in fns):
        return list
    return lambda value: [f(v) for f, v in zip(fns, value)]


def _rebuild_dataclass(cls: type, values: Dict[str, Any]) -> Any:
    """``cls(**init fields)``, then the other fields set directly.

    Through ``__init__`` so that ``__post_init__`` runs: transformers' ``ModelOutput``
    fills its dict entries (non-None fields) there.
    """
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    obj = cls(**{k: v for k, v in values.items() if k in init})
    for name, item in values.items():
        if name not in init:
            object.__setattr__(obj, name, item)
    return obj
