"""Backends: the ``Backend`` protocol, the registry, and the built-in backends.

>>> from tensorplay_graph.backends import available_backends, get_backend
>>> "reference" in available_backends()
True
"""

from __future__ import annotations

from ..lazy import lazy_exports

_EXPORTS = {
    "Backend": "base", "Region": "base", "Kernel": "base",
    "register_backend": "registry", "get_backend": "registry",
    "available_backends": "registry", "resolve_backends": "registry",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
