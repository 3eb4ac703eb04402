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
from types import ModuleType

__all__ = ["hooks_for"]


def hooks_for(framework: str) -> ModuleType:
    """The trace-hook module of ``framework`` (imports the framework)."""
    return importlib.import_module(f"{__name__}.{framework}")
