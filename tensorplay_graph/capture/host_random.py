"""Python-level random draws during a trace: a value a captured graph would freeze.

``x * random.random()`` or ``if np.random.rand() < p:`` runs once, at capture: the graph
would hold that one draw and replay it on every call, where eager draws anew. The
frameworks' own random ops (``torch.rand``) are nodes of the graph and draw per call
(:mod:`.randomness`); Python's ``random`` module, numpy's global generator and the
generator objects a program holds (``self.rng = random.Random(0)``, a
``np.random.default_rng()``) are not. :class:`HostRandomness` snapshots their states before
the trace; a state changed after it means the program drew from one, and the capture ends in
:class:`HostRandomnessError`, a graph break (Dynamo replays Python ``random`` calls; a
TensorPlay program runs eagerly), with every state put back so that the run that follows
draws what eager would have drawn.
"""

from __future__ import annotations

import random
from typing import Any, Iterable, List, Tuple

import numpy as np

from .proxy import GraphBreakError


class HostRandomnessError(GraphBreakError):
    """The program draws from a Python-level random generator while it runs.
    ``eager_for_torch``: Dynamo would freeze the draw too (a ``random.Random`` object the
    program holds: torch 2.13 replays only the ``random`` module's own functions), so the
    program runs eagerly."""

    eager_for_tensorplay = True

    def __init__(self, message: str, eager_for_torch: bool = False) -> None:
        super().__init__(message)
        self.eager_for_torch = eager_for_torch


def is_generator(value: Any) -> bool:
    """A Python-level random generator object whose draws a graph cannot repeat."""
    return isinstance(value, (random.Random, np.random.RandomState, np.random.Generator))


def _state(generator: Any) -> Any:
    if isinstance(generator, random.Random):
        return generator.getstate()
    if isinstance(generator, np.random.Generator):
        return generator.bit_generator.state
    return generator.get_state(legacy=False)


def _set_state(generator: Any, state: Any) -> None:
    if isinstance(generator, random.Random):
        generator.setstate(state)
    elif isinstance(generator, np.random.Generator):
        generator.bit_generator.state = state
    else:
        generator.set_state(state)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return bool(np.array_equal(a, b))
    return a == b


def _global_generators() -> List[Tuple[str, Any]]:
    # the instances behind ``random.random()`` and ``np.random.rand()``
    found = [("random", getattr(random, "_inst", None)),
             ("numpy.random", getattr(np.random.mtrand, "_rand", None))]
    return [(name, g) for name, g in found if is_generator(g)]


class HostRandomness:
    """The states of the global generators and of ``generators`` (``(path, object)``, found
    by the state walk) before a trace."""

    def __init__(self, generators: Iterable[Tuple[str, Any]] = ()) -> None:
        self._saved = [(path, g, _state(g)) for path, g in _global_generators() + list(generators)]

    def check_unchanged(self) -> None:
        """Raise :class:`HostRandomnessError` (after restoring) if the trace drew from one."""
        drawn = [(path, g) for path, g, before in self._saved if not _same(_state(g), before)]
        if drawn:
            self.restore()
            held = any(isinstance(g, random.Random) and g is not getattr(random, "_inst", None)
                       for _, g in drawn)
            raise HostRandomnessError(
                "the program draws from a Python-level random generator "
                f"({', '.join(path for path, _ in drawn)}) "
                "while it runs: a captured graph would repeat the capture's draw on every "
                "call. tensorplay_graph.compile hands such programs to the framework's "
                "frontend (a graph break); to keep our capture, draw with the framework's "
                "random ops (torch.rand, tensorplay.rand), which the graph records, or pass "
                "the value as an argument", eager_for_torch=held)

    def restore(self) -> None:
        for _, generator, state in self._saved:
            _set_state(generator, state)
