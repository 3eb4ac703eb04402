"""``print`` inside a captured program: one node that prints the real values at call time.

Run eagerly during capture, ``print(x)`` would show ``Proxy(x)`` once and never again.
While a trace runs, ``builtins.print`` is a thin wrapper: a call that holds a proxy of
the trace running *in this context* becomes a ``call_function`` node whose target,
:func:`runtime_print`, declares ``_is_impure`` (never removed, never reordered, a
``side_effect`` barrier); every other call -- other threads, other contexts, real
values -- goes straight to the original ``print``, so nobody else sees a difference.
The wrapper is installed by the first active capture and removed by the last one.
Limit: a string built from a traced tensor before printing (``f"{x}"``) is formatted
at capture and shows ``Proxy(x)``; pass the tensor itself (``print("x =", x)``).
"""

from __future__ import annotations

import builtins
import threading
from contextlib import contextmanager
from typing import Any, Iterator

from .context import ACTIVE_TRACER, tracer_of

__all__ = ["runtime_print", "recording_print"]

_LOCK = threading.Lock()
_ACTIVE = 0
_ORIGINAL: Any = None


def runtime_print(*args: Any, **kwargs: Any) -> None:
    """``print`` as a graph node: runs when the compiled program runs, with real values."""
    builtins.print(*args, **kwargs)


runtime_print._is_impure = True  # type: ignore[attr-defined]
runtime_print._impure_reason = (  # type: ignore[attr-defined]
    "print runs when the program runs, with the real values, in program order")


def _no_example(*args: Any, **kwargs: Any) -> None:
    return None  # capture prints nothing: the program's own run prints, once per call


def _print(*args: Any, **kwargs: Any) -> None:
    tracer = ACTIVE_TRACER.get()
    if tracer is not None and not tracer.computing_example and \
            tracer_of(args, kwargs) is tracer:
        tracer.create_proxy("call_function", runtime_print, args, kwargs, example_fn=_no_example)
        return None
    return _ORIGINAL(*args, **kwargs)


@contextmanager
def recording_print() -> Iterator[None]:
    """Record ``print`` calls on proxies of the current trace (see the module docstring)."""
    global _ACTIVE, _ORIGINAL
    with _LOCK:
        if _ACTIVE == 0:
            _ORIGINAL = builtins.print
            builtins.print = _print
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                if builtins.print is _print:  # someone else may have replaced it since
                    builtins.print = _ORIGINAL
                _ORIGINAL = None
