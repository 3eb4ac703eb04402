"""Grad mode read by a program: ``x * 2 if torch.is_grad_enabled() else x * 3``.

A capture runs the program's Python once, so a branch on the grad mode is frozen: the graph
captured with grad enabled would serve a ``no_grad`` call the other branch. While a trace
runs, each framework's ``is_grad_enabled`` / ``is_inference_mode_enabled`` is watched; when
code other than the frameworks' own (theirs reads it for autograd bookkeeping, which the
compiled program redoes per call) asked for it, the specialization is guarded on its value,
as Dynamo guards grad mode: the other mode captures again.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, List

from .guards import VALUE, Guard, ValueGuard
from .structure import FRAMEWORK_PACKAGES

#: the mode queries watched, per framework module
QUERIES = ("is_grad_enabled", "is_inference_mode_enabled")
_INTERNAL = FRAMEWORK_PACKAGES + (__name__.split(".")[0],)


class GradModeReads:
    """The mode queries the program called during a trace (``guards()`` after it)."""

    def __init__(self) -> None:
        self.read: List[Callable[[], Any]] = []

    def _watch(self, query: Callable[[], Any]) -> Callable[[], Any]:
        def watched() -> Any:
            caller = sys._getframe(1).f_globals.get("__name__") or ""
            if caller.split(".")[0] not in _INTERNAL and query not in self.read:
                self.read.append(query)
            return query()
        return watched

    def guards(self) -> List[Guard]:
        return [(ValueGuard(query, f"the grad mode the program reads ({query.__name__}())"),
                 VALUE, None) for query in self.read]


@contextmanager
def watching(modules: Iterable[Any]) -> Iterator[GradModeReads]:
    """Watch the mode queries of ``modules`` (the loaded frameworks) while the trace runs."""
    reads = GradModeReads()
    patched = []
    for module in modules:
        for name in QUERIES:
            query = getattr(module, name, None)
            if callable(query):
                setattr(module, name, reads._watch(query))
                patched.append((module, name, query))
    try:
        yield reads
    finally:
        for module, name, query in patched:
            setattr(module, name, query)
