"""Profiler spans named after the op, in the framework's own profiler.

Only the general call path asks; the hot path learns that a profiler is
recording from its device probe (see ``dispatch``), so an idle profiler
costs nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..frameworks import adapter_for


def profiler_active(framework: str) -> bool:
    """True while the framework's profiler records on this process."""
    return adapter_for(framework).profiler_active()


def span(framework: str, name: str) -> Any:
    """A context manager recording one span called ``name`` (no-op when idle)."""
    adapter = adapter_for(framework)
    if not adapter.profiler_active():
        return contextlib.nullcontext()
    return adapter.profiler_span(name)
