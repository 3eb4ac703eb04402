"""The backend registry: backends by name, built-ins loaded lazily.

>>> from tensorplay_graph.backends import get_backend
>>> get_backend("reference").name
'reference'

A backend module makes itself known by calling :func:`register_backend` at
import; built-in backends are listed in ``_BUILTIN`` (name -> module) and
imported on first use, so asking for ``"triton"`` imports Triton only then.
``"interpreter"`` is implicit: it claims whatever no other backend claimed
(those nodes simply stay in the graph and run through eager dispatch).
"""

from __future__ import annotations

import importlib
import logging
from typing import Dict, Iterable, List, Optional, Tuple

from ..errors import UnknownBackendError, UnsupportedOpError

__all__ = ["register_backend", "get_backend", "available_backends", "resolve_backends",
           "unavailable_backends", "INTERPRETER", "PREFERENCE"]

log = logging.getLogger(__name__)

INTERPRETER = "interpreter"

# name -> module that registers it on import (or defines ``BACKEND`` / ``make_backend()``),
# in preference order.
_BUILTIN: Dict[str, str] = {
    "triton": "tensorplay_graph.backends.triton",
    "tilelang": "tensorplay_graph.backends.tilelang",
    "reference": "tensorplay_graph.backends.reference",
}
#: The built-in backends in preference order: what ``explain`` plans with by default and
#: what ``compile(backend="auto")`` chooses from (each where it is profitable).
PREFERENCE: Tuple[str, ...] = tuple(_BUILTIN)
_REGISTRY: Dict[str, object] = {}
_IMPORT_ERRORS: Dict[str, str] = {}


def register_backend(backend, *, replace: bool = False):
    """Make ``backend`` (an object with ``name``, ``supports``, ``compile``) known by name."""
    name = getattr(backend, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"backend {backend!r} needs a `name` that is an identifier, got {name!r}")
    for attr in ("supports", "compile"):
        if not callable(getattr(backend, attr, None)):
            raise TypeError(f"backend {name!r} has no callable `{attr}`; see backends/base.py Backend")
    if name == INTERPRETER:
        raise ValueError("'interpreter' is implicit (it runs whatever is unclaimed); pick another name")
    if name in _REGISTRY and not replace and _REGISTRY[name] is not backend:
        raise ValueError(f"backend {name!r} is already registered; pass replace=True to override")
    _REGISTRY[name] = backend
    return backend


def _load_builtin(name: str) -> Optional[object]:
    module_name = _BUILTIN.get(name)
    if module_name is None:
        return None
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a missing toolchain must not break planning
        _IMPORT_ERRORS[name] = f"{type(exc).__name__}: {exc}"
        log.info("backend %r unavailable: %s", name, _IMPORT_ERRORS[name])
        return None
    if name not in _REGISTRY:
        factory = getattr(module, "make_backend", None)
        backend = factory() if callable(factory) else getattr(module, "BACKEND", None)
        if backend is None:
            _IMPORT_ERRORS[name] = (f"{module_name} neither registered a backend named {name!r} "
                                    f"nor defines BACKEND / make_backend()")
            return None
        register_backend(backend)
    return _REGISTRY.get(name)


def get_backend(name: str):
    """The backend registered as ``name``; raises ``UnsupportedOpError`` naming the choices."""
    backend = _REGISTRY.get(name) or _load_builtin(name)
    if backend is None:
        why = _IMPORT_ERRORS.get(name)
        detail = f" ({why})" if why else ""
        error = UnsupportedOpError if name in _BUILTIN else UnknownBackendError
        raise error(
            f"no backend named {name!r}{detail}; available: {', '.join(available_backends())}; "
            f"register one with tensorplay_graph.backends.register_backend(...)")
    return backend


def known_backend_names() -> List[str]:
    """Every backend name: built-ins (importable or not) and registered ones."""
    return list(_BUILTIN) + sorted(n for n in _REGISTRY if n not in _BUILTIN)


def available_backends() -> List[str]:
    """Names that can be used now (registered or importable built-ins), then 'interpreter'."""
    names = [n for n in _BUILTIN if n in _REGISTRY or _load_builtin(n) is not None]
    names += sorted(n for n in _REGISTRY if n not in names)
    return names + [INTERPRETER]


def unavailable_backends() -> Dict[str, str]:
    """Built-in backends that failed to import, with the error text."""
    return {n: e for n, e in _IMPORT_ERRORS.items() if n not in _REGISTRY}


def resolve_backends(backends: Iterable) -> List[object]:
    """Backend objects for a list of names/objects, 'interpreter' dropped (it is implicit)."""
    if backends is None:
        return []
    if isinstance(backends, str) or hasattr(backends, "supports"):
        backends = [backends]
    resolved = []
    for b in backends:
        if isinstance(b, str):
            if b == INTERPRETER:
                continue
            b = get_backend(b)
        resolved.append(b)
    return resolved


def try_resolve_backends(backends: Iterable) -> Tuple[List[object], Dict[str, str]]:
    """Like :func:`resolve_backends`, but returns (usable, {name: why missing}) instead of raising."""
    if isinstance(backends, str) or hasattr(backends, "supports"):
        backends = [backends]
    usable, missing = [], {}
    for b in backends or ():
        try:
            usable.extend(resolve_backends([b]))
        except (UnsupportedOpError, UnknownBackendError) as exc:
            missing[str(b)] = str(exc)
    return usable, missing
