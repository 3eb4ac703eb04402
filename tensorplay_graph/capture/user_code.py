"""Which Python code is the user's: the modules whose globals a capture must guard.

A program reads module-level state through more than its own module: a helper imported from
the project's ``utils.py`` reads ``utils.SCALE``, a submodule's ``forward`` in ``blocks.py``
reads ``blocks.USE_GELU``. Dynamo guards every global the code it inlines reads; our capture
runs the Python code itself and sees only what it walks before the trace
(:func:`.object_state.function_roots`). The walk follows the user's code: functions and
modules named by the program, transitively, and the ``forward`` of every submodule class,
as long as they come from the user's own files.

Installed libraries (anything under ``site-packages`` / ``dist-packages``: transformers,
timm, numpy), the standard library, the frameworks and this package are not followed:
their module state is not a program's configuration, and walking it would guard (and
re-capture on) caches they keep for themselves (``logging``'s level cache).
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import types
from typing import Any, Iterator, Optional

from .structure import FRAMEWORK_PACKAGES

_OWN = __name__.split(".")[0]
_LIBRARY_MARKERS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


@functools.lru_cache(maxsize=1)
def _stdlib_dirs() -> tuple:
    paths = sysconfig.get_paths()
    return tuple(os.path.join(os.path.realpath(paths[key]), "")
                 for key in ("stdlib", "platstdlib") if paths.get(key))


def is_user_module(module: Any) -> bool:
    """Whether ``module`` is the user's code (see the module docstring)."""
    return isinstance(module, types.ModuleType) and is_user_namespace(vars(module))


def is_user_function(value: Any) -> bool:
    """A plain Python function defined in the user's code."""
    return isinstance(value, types.FunctionType) and is_user_namespace(value.__globals__)


def is_user_namespace(namespace: Any) -> bool:
    """Whether a module's globals dict is the user's code."""
    return _is_user(namespace.get("__name__") or "", namespace.get("__file__"))


@functools.lru_cache(maxsize=4096)
def _is_user(name: str, path: Optional[str]) -> bool:
    # a module without a file (``exec``'d code, a notebook cell) is the user's unless its
    # name says otherwise
    top = name.split(".")[0]
    if top == "__main__":  # the script being run (under a runner, the runner's: still code)
        return True
    if top in FRAMEWORK_PACKAGES or top == _OWN or top in sys.stdlib_module_names:
        return False
    if not path:
        return True
    path = os.path.realpath(path)
    return not any(marker in path for marker in _LIBRARY_MARKERS) and \
        not path.startswith(_stdlib_dirs())


def is_stdlib_machinery(value: Any) -> bool:
    """Whether a plain object is the standard library's own machinery (a ``logging.Logger``
    and its level cache, a ``random.Random``, a lock): not program state, though a program
    names it. Its data holders (``SimpleNamespace``, ``argparse.Namespace``) are state."""
    cls = type(value)
    return cls.__module__.split(".")[0] in sys.stdlib_module_names and \
        (cls.__module__, cls.__qualname__) not in _DATA_HOLDERS


_DATA_HOLDERS = {("types", "SimpleNamespace"), ("argparse", "Namespace")}


def submodule_forwards(root: Any) -> Iterator[Any]:
    """The ``forward`` functions of the user-defined classes of ``root``'s modules (their
    globals are read when the program calls the submodules)."""
    named = getattr(root, "named_modules", None)
    if not callable(named):
        return
    seen = set()
    for _, module in named():
        cls = type(module)
        if cls in seen:
            continue
        seen.add(cls)
        forward = getattr(cls, "forward", None)
        if is_user_function(forward):
            yield forward
