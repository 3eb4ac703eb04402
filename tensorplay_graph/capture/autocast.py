"""Autocast around or inside a captured program: a graph break, never a frozen dtype.

Autocast casts below the ops a capture records: a ``matmul`` traced under
``torch.autocast("cuda", dtype=torch.bfloat16)`` is a plain ``matmul`` node, which a lowered
kernel runs in float32, and a graph captured without autocast, called under it, hands its
float32 kernels the bfloat16 tensors of the eager ops around them (on the CPU reference
backend: a crash deep in numpy). Dynamo records autocast's regions (``autocast_scope`` nodes,
:mod:`.dynamo_graph`), so:

- a call made under autocast, and an autocast region the program enters, end the capture in
  :class:`AutocastError`, a graph break (torch: Dynamo; TensorPlay: eager);
- an ``autocast(enabled=False)`` region in a call made without autocast changes nothing
  (Llama's rotary embedding has one) and stays captured;
- every specialization is guarded on its framework's autocast being off, so a later call under autocast
  captures again and breaks there.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Dict, Iterable, Iterator, Tuple

from .guards import VALUE, Guard, ValueGuard
from .patches import patch
from .proxy import GraphBreakError

#: the device types whose autocast state is checked
DEVICES = ("cpu", "cuda")
_FIX = ("tensorplay_graph.compile hands such programs to the framework's frontend (a graph "
        "break: Dynamo records autocast's regions) or runs them eagerly (TensorPlay)")


class AutocastError(GraphBreakError):
    """The call runs under autocast, or the program enters an autocast region."""

    eager_for_tensorplay = True


def _state(module: Any) -> Tuple[bool, ...]:
    found = []
    for device in DEVICES:
        try:
            found.append(bool(module.is_autocast_enabled(device)))
        except Exception:  # noqa: BLE001 - a device type this build has no autocast for
            found.append(False)
    return tuple(found)


@contextmanager
def watching(frameworks: Iterable[Tuple[str, Any]]) -> Iterator[Dict[str, Guard]]:
    """Raise :class:`AutocastError` for a call under autocast, and while the trace runs for
    an autocast region the program enters; yields per framework the guard (autocast off)
    its programs keep."""
    frameworks = [(name, module) for name, module in frameworks
                  if callable(getattr(module, "is_autocast_enabled", None))]
    guards: Dict[str, Guard] = {}
    for name, module in frameworks:
        state = _state(module)
        if any(state):
            on = [d for d, enabled in zip(DEVICES, state) if enabled]
            raise AutocastError(f"the call runs under {name} autocast ({', '.join(on)}): a "
                                f"captured graph would not repeat its casts. {_FIX}")
        guards[name] = (ValueGuard(lambda module=module: _state(module),
                                   f"{name} autocast (off at capture)"), VALUE, None)
    with ExitStack() as patches:
        for name, module in frameworks:
            cls = getattr(module, "autocast", None)
            if isinstance(cls, type) and "__enter__" in vars(cls):
                patch(patches, cls, "__enter__", _refusing(cls.__enter__, name))
        yield guards


def _refusing(enter: Any, framework: str) -> Any:
    def __enter__(self: Any) -> Any:
        if getattr(self, "_enabled", True):
            raise AutocastError(f"the program enters a {framework} autocast region "
                                f"({getattr(self, 'device', '?')}, "
                                f"{getattr(self, 'fast_dtype', '?')}): a captured graph would "
                                f"not repeat its casts. {_FIX}")
        return enter(self)
    return __enter__
