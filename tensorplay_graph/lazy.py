"""Public names of a subpackage resolved on first use, from the submodule that defines them.

Importing ``tensorplay_graph.passes`` or ``.backends`` must not import every pass or
backend (nor the frameworks they reach); a name listed here is imported when first read.

>>> getattr_, dir_, all_ = lazy_exports("tensorplay_graph.backends", {"get_backend": "registry"})
>>> all_, getattr_("get_backend").__name__
(['get_backend'], 'get_backend')
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Tuple

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Dict[str, str]
                 ) -> Tuple[Callable[[str], Any], Callable[[], List[str]], List[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, whose public names are
    ``exports`` (name -> the submodule of ``package`` that defines it)."""
    names = sorted(exports)

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        return list(names)

    return __getattr__, __dir__, names
