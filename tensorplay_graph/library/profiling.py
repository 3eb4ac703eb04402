"""Profiler spans named after the op, in the framework's own profiler.

Only the general call path asks; the hot path learns that a profiler is
recording from its device probe (see ``dispatch``), so an idle profiler
costs nothing.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator


def profiler_active(framework: str) -> bool:
    """True while the framework's profiler records on this process."""
    if framework == "tensorplay":
        tp = sys.modules.get("tensorplay")
        is_active = getattr(getattr(tp, "_C", None), "_profiler_is_active", None)
        if is_active is not None and is_active():
            return True
        tp_library = sys.modules.get("tensorplay.library")
        return bool(getattr(tp_library, "_profiling_sessions", 0))
    if framework == "torch":
        prof = sys.modules.get("torch.autograd.profiler")
        return bool(getattr(prof, "_is_profiler_enabled", False))
    return False


@contextlib.contextmanager
def _tensorplay_span(name: str) -> Iterator[None]:
    c_api = sys.modules["tensorplay"]._C
    c_api._profiler_user_begin(name)
    try:
        yield
    finally:
        c_api._profiler_user_end()


def span(framework: str, name: str) -> Any:
    """A context manager recording one span called ``name`` (no-op when idle)."""
    if not profiler_active(framework):
        return contextlib.nullcontext()
    if framework == "tensorplay":
        return _tensorplay_span(name)
    import torch.autograd.profiler as torch_profiler

    return torch_profiler.record_function(name)
