"""Name, argument and schema validation, and ``infer_schema``.

Schemas are not interpreted by a dispatcher: they are kept on the op for
introspection, documentation and ``opcheck``.  Only their shape is checked.
"""

from __future__ import annotations

import builtins
import inspect
import re
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional

COMPOSITE_KEYS = frozenset({"CompositeExplicitAutograd", "CompositeImplicitAutograd"})
_COMPOSITE_LOWER = frozenset(key.lower() for key in COMPOSITE_KEYS) | {"default", "composite"}

# ``ns::name(...) -> ...`` or a bare ``(...) -> ...``; the head is checked separately.
_SCHEMA_RE = re.compile(r"^\s*(?P<head>[^(]*?)\s*\((?P<params>.*)\)\s*->\s*(?P<ret>\S.*?)\s*$", re.S)


def require_str(value: Any, what: str, expected: str = "a str") -> str:
    """``value``, which must be a str (TypeError naming ``what`` otherwise)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be {expected}, got {type(value)!r}")
    return value


def validate_name(name: Any) -> tuple[str, str]:
    """Split ``"ns::name"`` into ``(ns, name)``; both must be identifiers."""
    parts = require_str(name, "op name").split("::")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(f'expected a qualified op name like "mylib::my_op", got {name!r}')
    namespace, opname = parts
    if not (namespace.isidentifier() and opname.isidentifier()):
        raise ValueError(f"namespace and op name must be identifiers, got {name!r}")
    return namespace, opname


def validate_mutates_args(mutates_args: Any) -> tuple[str, ...]:
    """An iterable of argument names (a bare str is rejected: it is a common typo)."""
    if isinstance(mutates_args, str) or not isinstance(mutates_args, Iterable):
        hint = f"; write ({mutates_args!r},) for one name" if isinstance(mutates_args, str) else ""
        raise TypeError(
            f"mutates_args must be an iterable of argument names, got {mutates_args!r}{hint}"
        )
    mutated = tuple(mutates_args)
    if any(not isinstance(item, str) for item in mutated):
        raise TypeError(f"mutates_args entries must be strings, got {mutated!r}")
    return mutated


def check_mutated_names(qualname: str, fn: Callable[..., Any], mutated: Iterable[str]) -> None:
    """ValueError when a declared mutated name is not a parameter of ``fn``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = [name for name in mutated if name not in params]
    if unknown:
        raise ValueError(
            f"{qualname}: mutates_args names {unknown} are not parameters of "
            f"{getattr(fn, '__name__', fn)!r} (parameters: {list(params)})"
        )


def normalize_device_types(device_types: Any) -> Optional[list[str]]:
    """``None`` (device-agnostic) or a list of lower-case device keys."""
    if device_types is None:
        return None
    items = [device_types] if isinstance(device_types, str) else list(device_types)
    keys: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(
                f"device types must be strings, got {item!r}; use None to "
                "declare one device-agnostic implementation"
            )
        key = item.lower()
        if key not in keys:
            keys.append(key)
    return keys


def is_composite(device_type: Any) -> bool:
    """True for the ``Composite...`` spellings that select the device-agnostic slot."""
    return isinstance(device_type, str) and device_type in COMPOSITE_KEYS


def slot_key(device_types: Any) -> Any:
    """Registry slot(s) for the top-level registration functions.

    ``None``, an empty iterable and the composite spellings select the
    device-agnostic slot (``None``); concrete devices lower-case.
    """
    if device_types is None:
        return None
    if isinstance(device_types, str):
        return None if is_composite(device_types) else device_types.lower()
    keys = list(device_types)
    if not keys:
        return None
    if len(keys) == 1:
        return slot_key(keys[0])
    return [slot_key(key) for key in keys]


def dispatch_key_of(dispatch_key: Any) -> Optional[str]:
    """``get_kernel``'s key: ``"default"``/composite spellings -> ``None``."""
    lowered = require_str(dispatch_key, "dispatch_key").lower()
    return None if lowered in _COMPOSITE_LOWER else lowered


def validate_schema(schema: Any, qualname: Optional[str] = None) -> Optional[str]:
    """Accept ``"ns::name(...) -> ..."`` or a bare ``"(...) -> ..."``; keep it verbatim."""
    if schema is None:
        return None
    match = _SCHEMA_RE.match(require_str(schema, "schema", "a str or None"))
    if match is None:
        raise ValueError(
            f'schema must look like "ns::name(Tensor x) -> Tensor" or '
            f'"(Tensor x) -> Tensor", got {schema!r}'
        )
    head = match.group("head")
    if head:
        validate_name(head)
        if qualname is not None and head != qualname:
            raise ValueError(f"schema {schema!r} names {head!r} but the op is {qualname!r}")
    return schema


def schema_head(schema: str) -> str:
    """The ``ns::name`` before the parameter list of a define() string."""
    return schema.split("(", 1)[0].strip()


# ---------------------------------------------------------------------------
# infer_schema
# ---------------------------------------------------------------------------

_PRIMITIVES = {int: "SymInt", float: "float", bool: "bool", str: "str"}


def _is_tensor_annotation(annotation: Any) -> bool:
    if annotation == "Tensor":
        return True
    name = getattr(annotation, "__name__", "")
    module = getattr(annotation, "__module__", "") or ""
    return name in ("Tensor", "TensorBase") and module.split(".")[0] in ("torch", "tensorplay")


def _is_dtype_annotation(annotation: Any) -> bool:
    name = getattr(annotation, "__name__", "")
    module = getattr(annotation, "__module__", "") or ""
    return name in ("dtype", "DType") and module.split(".")[0] in ("torch", "tensorplay")


def annotation_to_schema(annotation: Any) -> str:
    """Best-effort translation of one annotation into a schema atom.

    Unannotated parameters are tensors (the common custom-op case), so are
    annotations that mean nothing to a schema.
    """
    if annotation is None or annotation is inspect.Parameter.empty:
        return "Tensor"
    if annotation is type(None):
        return "()"
    if _is_tensor_annotation(annotation):
        return "Tensor"
    if _is_dtype_annotation(annotation):
        return "ScalarType"
    if annotation in _PRIMITIVES:
        return _PRIMITIVES[annotation]
    origin = typing.get_origin(annotation)
    union_type = getattr(__import__("types"), "UnionType", None)
    if origin is typing.Union or (union_type is not None and origin is union_type):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return annotation_to_schema(members[0]) + "?"
        return "(" + ", ".join(annotation_to_schema(a) for a in members) + ")"
    if origin in (list, tuple, Sequence, typing.Sequence):
        members = typing.get_args(annotation)
        if origin is tuple and members and members[-1] is not Ellipsis:
            return "(" + ", ".join(annotation_to_schema(a) for a in members) + ")"
        return f"{annotation_to_schema(members[0] if members else 'Tensor')}[]"
    return "Tensor"


class _UnknownAnnotation:
    """Stands for a name a string annotation uses but the function cannot see (a local)."""


class _LenientNames(dict):
    """Name lookup for string annotations: closure, globals, builtins, typing, else unknown."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self._globals = getattr(fn, "__globals__", {})
        try:
            self.update(inspect.getclosurevars(fn).nonlocals)
        except (TypeError, ValueError):
            pass

    def __missing__(self, key: str) -> Any:
        for space in (self._globals, vars(builtins), vars(typing)):
            if key in space:
                return space[key]
        return _UnknownAnnotation


def _type_hints(fn: Callable[..., Any]) -> dict:
    """Resolved annotations; string annotations naming invisible locals still resolve."""
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - e.g. a local class named in a string annotation
        pass
    names = _LenientNames(fn)
    hints = {}
    for key, value in (getattr(fn, "__annotations__", None) or {}).items():
        if isinstance(value, str):
            try:
                value = eval(value, {"__builtins__": builtins}, names)  # noqa: S307 - annotation text
            except Exception:  # noqa: BLE001 - unparseable: treat as unannotated
                value = None
        hints[key] = value
    return hints


def infer_schema(
    prototype_function: Callable[..., Any],
    /,
    *,
    mutates_args: Sequence[str],
    op_name: Optional[str] = None,
    tags: Any = (),
) -> str:
    """Schema string of a Python function, e.g. ``ns::f(Tensor, SymInt, Tensor(a!)) -> Tensor``.

    Mutated parameters get an alias annotation ``Tensor(a!)``; ``Optional[X]``
    becomes ``X?``, ``list[X]`` ``X[]``, ``tuple[X, Y]`` ``(X, Y)``;
    ``*args``/``**kwargs`` are skipped.

    >>> def f(x, n: int, out): ...
    >>> infer_schema(f, mutates_args=("out",), op_name="ns::f")
    'ns::f(Tensor, SymInt, Tensor(a!)) -> Tensor'
    """
    del tags
    mutated = frozenset(validate_mutates_args(mutates_args))
    if not callable(prototype_function):
        raise TypeError(f"prototype_function must be callable, got {type(prototype_function)!r}")
    hints = _type_hints(prototype_function)
    parameters = inspect.signature(prototype_function).parameters
    unknown = sorted(mutated - set(parameters))
    if unknown:
        raise ValueError(f"mutates_args {unknown} are not parameters of {prototype_function!r}")
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    parts: list[str] = []
    for pname, parameter in parameters.items():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        atom = annotation_to_schema(hints.get(pname))
        if pname in mutated:
            atom = f"{atom}({next(letters)}!)"
        parts.append(atom)
    returns = annotation_to_schema(hints.get("return"))
    name = op_name if op_name is not None else getattr(prototype_function, "__name__", "op")
    if "::" in name:
        validate_name(name)
    return f"{name}({', '.join(parts)}) -> {returns}"


def returns_none(body: Any, mutates_args: Any) -> bool:
    """True when ``body`` is annotated ``-> None`` (unannotated: when it mutates arguments)."""
    try:
        annotation = inspect.signature(body).return_annotation if body else None
    except (TypeError, ValueError):
        return True
    if annotation is inspect.Signature.empty:
        return bool(mutates_args)
    return annotation in (None, type(None), "None")


def fake_returned_none(name: str, fake: Any) -> str:
    """The message for a ``register_fake`` function that returned None for a tensor op."""
    code = getattr(fake, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    label = getattr(fake, "__qualname__", repr(fake))
    return (f"the fake kernel of {name}, {label}{where}, returned None, but {name} returns "
            f"tensors; a fake must return outputs with the real outputs' shape and dtype "
            f"(e.g. `return x.new_empty(out_shape)`), or annotate the op `-> None`")
