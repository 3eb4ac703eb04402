"""Trace hooks: how capture intercepts each framework's calls while a trace runs.

One module per framework (``tensorplay.py``, ``torch.py``), imported only when that
framework is loaded; with the framework adapters (``tensorplay_graph.frameworks``) they
are the only modules that touch a framework. Each defines:

- ``resolve_function(func, args, kwargs) -> (kind, target, args, kwargs)``: a call that
  reached a proxy through the framework's override protocol, as a graph node;
- ``tracing(tracer, on_module_call)``: a context manager installing the hooks for one trace;
- optionally ``random_mode(tracer)`` (a context recording random calls that hold no proxy)
  with ``pause_mode(mode) -> bool`` / ``resume_mode(mode)``.
"""

from __future__ import annotations

import importlib
import operator
from types import ModuleType

__all__ = ["hooks_for", "BINARY_DUNDERS"]

#: Tensor dunder methods both frameworks route through ``operator`` (binary ops, indexing).
BINARY_DUNDERS = {
    "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
    "__truediv__": operator.truediv, "__floordiv__": operator.floordiv,
    "__mod__": operator.mod, "__pow__": operator.pow, "__matmul__": operator.matmul,
    "__and__": operator.and_, "__or__": operator.or_, "__xor__": operator.xor,
    "__lshift__": operator.lshift, "__rshift__": operator.rshift,
    "__lt__": operator.lt, "__le__": operator.le, "__gt__": operator.gt,
    "__ge__": operator.ge, "__eq__": operator.eq, "__ne__": operator.ne,
    "__getitem__": operator.getitem, "__setitem__": operator.setitem,
}


def hooks_for(framework: str) -> ModuleType:
    """The trace-hook module of ``framework`` (imports the framework)."""
    return importlib.import_module(f"{__name__}.{framework}")
