"""Identifier allocation for node names and generated-code globals.

Generated Python reuses node names as local variables and references
``call_function`` targets through a globals dict, so every name that reaches
source text must be a valid, non-reserved identifier. Every user-supplied
string (a node name, an op name, a qualname) passes through :func:`sanitize`
before it can become one.
"""

from __future__ import annotations

import builtins
import keyword
import re
from functools import lru_cache
from typing import Any, Dict, Iterable, Optional, Set

# Names generated code needs for itself: the module argument and the helpers
# codegen binds in globals.
ANNOTATOR_NAME = "_tpg_annotate"
ERROR_NAME = "_tpg_error"
RESERVED_NAMES = frozenset({"self", "forward", "__builtins__", "__name__", "__file__",
                            ANNOTATOR_NAME, ERROR_NAME})

_BUILTIN_NAMES = frozenset(dir(builtins))
_ILLEGAL_CHAR = re.compile(r"[^0-9a-zA-Z_]+")
_ILLEGAL_EDGES = re.compile(r"^[^0-9a-zA-Z_]+|[^0-9a-zA-Z_]+$")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SUFFIX = re.compile(r"^(.*)_(\d+)$")


def is_identifier(name: Any) -> bool:
    """True when ``name`` can be a Python variable: identifier, not a keyword."""
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def is_safe_name(name: Any) -> bool:
    """True when ``name`` is an identifier that shadows no builtin and no reserved name."""
    return is_identifier(name) and name not in _BUILTIN_NAMES and name not in RESERVED_NAMES


def sanitize(candidate: Any) -> str:
    """Turn any string into a lowercase snake_case identifier.

    >>> sanitize("tensorplay.functional.add")
    'tensorplay_functional_add'
    >>> sanitize("LayerNorm")
    'layer_norm'
    >>> sanitize("1st")
    '_1st'
    """
    # Every node name passes through here, mostly the same few op names: cached.
    return _sanitize(candidate if type(candidate) is str else str(candidate))


@lru_cache(maxsize=4096)
def _sanitize(text: str) -> str:
    text = _CAMEL_BOUNDARY.sub("_", text).lower()
    text = _ILLEGAL_CHAR.sub("_", _ILLEGAL_EDGES.sub("", text)) or "_"
    if text[0].isdigit():
        text = "_" + text
    if not is_safe_name(text):
        text = text + "_"
    return text


@lru_cache(maxsize=4096)
def _stem(base: str) -> str:
    """``add_3`` -> ``add``: a taken name's numbering continues from its stem."""
    match = _SUFFIX.match(base)
    return base if match is None else match.group(1)


class Namespace:
    """Allocates unique safe identifiers, like ``torch.fx.graph._Namespace``.

    ``create_name("add")`` returns ``add``, then ``add_1``, ``add_2``... An
    object can be associated with its name so that asking again for the same
    object returns the same name (used for codegen globals).

    >>> ns = Namespace()
    >>> ns.create_name("x"), ns.create_name("x"), ns.create_name("class")
    ('x', 'x_1', 'class_')
    """

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._used: Set[str] = set(reserved)
        self._next_suffix: Dict[str, int] = {}
        self._obj_to_name: Dict[int, str] = {}
        self._objects: list = []  # keeps associated objects alive so ids stay unique

    def __contains__(self, name: str) -> bool:
        return name in self._used

    def create_name(self, candidate: Any, obj: Optional[Any] = None) -> str:
        """A fresh name derived from ``candidate`` (sanitized, suffixed when taken)."""
        if obj is not None and id(obj) in self._obj_to_name:
            return self._obj_to_name[id(obj)]
        base = sanitize(candidate)
        name = base
        if name in self._used:
            base = _stem(base)
            suffix = self._next_suffix.get(base, 1)
            name = f"{base}_{suffix}"
            while name in self._used:
                suffix += 1
                name = f"{base}_{suffix}"
            self._next_suffix[base] = suffix + 1
        self._used.add(name)
        if obj is not None:
            self._obj_to_name[id(obj)] = name
            self._objects.append(obj)
        return name

    def reserve(self, name: str) -> None:
        """Mark ``name`` as taken without allocating it."""
        self._used.add(name)

    def release(self, name: str) -> None:
        """Free ``name`` so a later allocation may reuse it."""
        self._used.discard(name)
