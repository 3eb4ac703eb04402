"""What a trace runs inside, and what an abandoned trace puts back.

:func:`enter_scope` enters, on the trace's ``ExitStack``: ``print`` recorded as a call-time
node, the grad-mode and autocast watches (:mod:`.grad_mode`, :mod:`.autocast`), and each
loaded framework's capture hooks and random-call mode. :func:`abandon` undoes what a failed
trace changed in the caller's objects, modules and Python-level random generators.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Dict, Optional, Tuple

from ..frameworks import adapter_for, loaded
from . import autocast, grad_mode
from .guards import Guard
from .hooks import hooks_for
from .host_random import HostRandomness
from .object_state import ObjectState
from .printing import recording_print


def enter_scope(tracer: Any, stack: ExitStack, state: Any
                ) -> Tuple[grad_mode.GradModeReads, Dict[str, Guard]]:
    """Enter the trace's contexts on ``stack``; the grad-mode reads and the autocast guards
    (both turn into guards once the program ran)."""
    stack.enter_context(recording_print())  # print(x) runs at call time
    frameworks = [(name, adapter_for(name).module) for name in loaded()]
    grad_reads = tracer._grad = stack.enter_context(grad_mode.watching(frameworks))
    autocast_guards = stack.enter_context(autocast.watching(frameworks))
    for name in loaded():
        # Capture hooks; libraries see a compiler tracing (is_compiling()); modules called
        # during the trace read their state as proxies.
        hooks = hooks_for(name)
        stack.enter_context(hooks.tracing(tracer, state.on_module_call))
        if hasattr(hooks, "random_mode"):
            # ``torch.rand(3)`` holds no proxy: only a function mode sees it.
            tracer._random_mode = stack.enter_context(hooks.random_mode(tracer))
            tracer._pause_mode, tracer._resume_mode = hooks.pause_mode, hooks.resume_mode
    return grad_reads, autocast_guards


def abandon(objects: ObjectState, state: Optional[Any],
            host: Optional[HostRandomness] = None) -> None:
    """Undo what an abandoned trace wrote into the caller's objects and modules, and the
    Python-level random draws it made (the run that follows draws them as eager would)."""
    objects.restore()
    if host is not None:
        host.restore()
    if state is not None:
        state.restore_modules()
