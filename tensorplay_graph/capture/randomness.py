"""Random calls with no traced argument, and the RNG state around a capture.

A call like ``torch.rand(3, 4)`` or ``tensorplay.randn(x.shape)`` holds no
proxy, so no tensor hook sees it: run eagerly, it would be one draw frozen into
the graph as a ``get_attr`` constant, and every call of the compiled program
would return the same "random" values. Each framework adapter therefore
installs a function mode for the duration of a trace (``random_mode``) that
sends such calls here, to be recorded as a ``call_function`` node (a ``random``
barrier once normalized). Deterministic factories (``zeros``, ``arange``) are
left alone: a constant is the right answer for them.

Capture itself must not advance the framework's random stream, or a program
seeded before its first compiled call would draw different numbers than eager:
:func:`preserved_rng_state` restores the state after the trace.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Dict, Iterator, Tuple

from ..frameworks import adapter
from .context import ACTIVE_TRACER, iter_proxies

_FRAMEWORKS = ("torch", "tensorplay")


def should_record(tracer: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    """True when a random call must become a node of ``tracer``'s graph.

    Not while the tracer computes an example value (that replay is the real
    draw), not for another context's trace, and not when a proxy is among the
    arguments: the proxy's own hook records those calls already.
    """
    if ACTIVE_TRACER.get() is not tracer or tracer.computing_example:
        return False
    for _ in iter_proxies((args, kwargs)):
        return False
    return True


def record_random(tracer: Any, func: Callable[..., Any], args: Tuple[Any, ...],
                  kwargs: Dict[str, Any]) -> Any:
    """Record ``func(*args, **kwargs)`` as one node; its example value is one real call."""
    return tracer.create_proxy("call_function", func, tuple(args), dict(kwargs))


@contextmanager
def preserved_rng_state() -> Iterator[None]:
    """Restore the random state of every imported framework on exit.

    Example values computed during capture (and example runs of a graph)
    draw real random numbers; restoring keeps ``manual_seed(s); compiled(x)``
    equal to ``manual_seed(s); fn(x)`` on the first call too.
    """
    with ExitStack() as stack:
        for name in _FRAMEWORKS:
            if sys.modules.get(name) is not None:
                stack.enter_context(adapter(name).fork_rng())
        yield
