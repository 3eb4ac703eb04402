"""Backends: the ``Backend`` protocol, the registry, and the built-in backends.

>>> from tensorplay_graph.backends import available_backends, get_backend
>>> "reference" in available_backends()
True
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Backend": "base", "Region": "base", "Kernel": "base",
    "register_backend": "registry", "get_backend": "registry",
    "available_backends": "registry", "resolve_backends": "registry",
}

__all__ = sorted(_EXPORTS)


def __dir__() -> list:
    return list(__all__)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
