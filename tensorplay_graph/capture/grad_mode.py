"""The grad mode inside a captured program: branches on it, and regions that change it.

A capture runs the program's Python once, in the mode of the call that captured it, and one
graph then serves calls in either mode. Two things would freeze that mode:

- a branch on it (``x * 2 if torch.is_grad_enabled() else x * 3``): each framework's
  ``is_grad_enabled`` / ``is_inference_mode_enabled`` is watched while a trace runs; when
  code other than the frameworks' own asked (theirs reads it for autograd bookkeeping, which
  the compiled program redoes per call), the specialization is guarded on its value, as
  Dynamo guards grad mode;
- a region that sets it (``with torch.no_grad(): t = ema(x)``, a ``@torch.no_grad()``
  helper): the frameworks' ``no_grad`` / ``enable_grad`` / ``set_grad_enabled`` /
  ``inference_mode`` contexts entered during the trace are tracked, and every tensor an op
  makes inside a disabling one is recorded through ``detach()``, so the graph keeps eager's
  "no gradient flows from here" in both modes. An enabling region inside a program called
  with grad disabled cannot be served by a compiled program: a graph break; one inside a
  grad-enabled call guards the specialization on the mode, so the other mode captures again.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from ..frameworks import is_tensor
from ..ir.effects import is_inplace
from ..ir.node import op_name
from .guards import VALUE, Guard, ValueGuard
from .patches import patch
from .proxy import GraphBreakError
from .structure import FRAMEWORK_PACKAGES

#: the mode queries watched, per framework module
QUERIES = ("is_grad_enabled", "is_inference_mode_enabled")
#: the mode contexts tracked: class name -> the mode it sets (None: read ``self.mode``)
CONTEXTS = {"no_grad": False, "enable_grad": True, "set_grad_enabled": None,
            "inference_mode": False}
_INTERNAL = FRAMEWORK_PACKAGES + (__name__.split(".")[0],)


class GradModeError(GraphBreakError):
    """An enabling region inside a call made with grad disabled. ``tp.compile`` would not
    follow it either: TensorPlay programs run eagerly."""

    eager_for_tensorplay = True


class AutogradCallError(GraphBreakError):
    """The program runs autograd itself (``loss.backward()``, ``autograd.grad``) on a traced
    value: a graph cannot replay a backward pass, and running it at capture would accumulate
    into the caller's ``.grad``."""

    eager_for_tensorplay = True

    def __init__(self, what: str, where: str) -> None:
        super().__init__(
            f"the program runs autograd itself ({what} at {where}): a captured graph cannot "
            "replay a backward pass. tensorplay_graph.compile hands such programs to the "
            "framework's frontend (Dynamo compiles the forward and runs the backward eagerly) "
            "or runs them eagerly (TensorPlay); to compile the forward alone, compile the "
            "model and call backward() outside")


class GradModeReads:
    """What the program did with the grad mode during one trace."""

    def __init__(self) -> None:
        self.read: List[Callable[[], Any]] = []
        #: the modes of the mode contexts the program entered, innermost last
        self.stack: List[bool] = []
        self._guard: Optional[Callable[[], Any]] = None  # an enabling region was traced
        #: each mode query's answer when the trace started: the call's own mode
        self.ambient: dict = {}
        #: framework name -> its ``is_grad_enabled`` (the real one)
        self.mode_query: dict = {}

    def _watch(self, query: Callable[[], Any]) -> Callable[[], Any]:
        def watched() -> Any:
            caller = sys._getframe(1).f_globals.get("__name__") or ""
            if caller.split(".")[0] not in _INTERNAL and query not in self.read:
                self.read.append(query)
            return query()
        return watched

    def region(self, framework: Optional[str]) -> Optional[bool]:
        """For a node made now in a ``framework`` program: ``False`` inside a disabling
        region (detach its tensors), ``None`` otherwise. An enabling region guards the
        specialization on the mode, or is a graph break when the call runs with grad
        disabled."""
        query = self.mode_query.get(framework)
        modes = [m for m in self.stack if m is not None]
        if not modes:
            return None
        if not modes[-1]:
            return False
        if not self.ambient.get(query, True) and not any(m is False for m in modes):
            raise GradModeError(
                "the program enables grad (enable_grad / set_grad_enabled(True)) inside a "
                "call made with grad disabled: a compiled program cannot record autograd "
                "there. The framework's frontend (or eager) runs it")
        self._guard = query
        return None

    def in_region(self, tracer: Any, node: Any, proxy: Any) -> Any:
        """For a node just recorded (``proxy``): its ``detach()`` proxy when it makes a tensor
        inside a disabling region, else None; an in-place write there into a tensor that
        requires grad raises :class:`GradModeError`."""
        if node.op not in ("call_function", "call_method") or node.target == "detach" or \
                self.region(tracer._framework) is not False:
            return None
        if is_inplace(node):
            first = node.args[0] if node.args else None
            if _requires_grad(first, tracer.attrs):
                raise GradModeError(
                    f"the program writes in place into {first.name}, which requires grad, "
                    f"under its own no_grad ({op_name(node)} at {node.meta.get('stack')}): a "
                    "compiled program cannot keep that write out of autograd. The framework's "
                    "frontend (or eager) runs it")
            return None
        if not is_tensor(proxy.example):
            return None
        return tracer.create_proxy("call_method", "detach", (proxy,), {})

    def guards(self) -> List[Guard]:
        queries = list(self.read)
        if self._guard is not None and self._guard not in queries:
            queries.append(self._guard)
        return [(ValueGuard(query, f"the grad mode the program reads or sets "
                                   f"({query.__name__}())"), VALUE, None) for query in queries]


def _requires_grad(node: Any, attrs: Dict[str, Any]) -> bool:
    """Whether the tensor behind ``node`` (a parameter, an input, a value) requires grad."""
    if getattr(node, "op", None) == "get_attr":
        return bool(getattr(attrs.get(node.target), "requires_grad", False))
    return bool(getattr(getattr(node, "meta", {}).get("tensor_meta"), "requires_grad", False))


def runs_autograd(kind: str, target: Any) -> bool:
    """Whether a recorded call runs autograd itself: ``.backward()``, ``autograd.grad`` /
    ``autograd.backward`` (:class:`AutogradCallError`)."""
    if kind == "call_method":
        return target == "backward"
    return kind == "call_function" and getattr(target, "__name__", None) in ("backward", "grad") \
        and str(getattr(target, "__module__", "")).endswith("autograd")


@contextmanager
def watching(frameworks: Iterable[Tuple[str, Any]]) -> Iterator[GradModeReads]:
    """Watch the mode queries and contexts of the loaded frameworks (``(name, module)``)
    while the trace runs (every patch undone on exit, whatever fails)."""
    reads = GradModeReads()
    with ExitStack() as patches:
        for framework, module in frameworks:
            reads.mode_query[framework] = getattr(module, "is_grad_enabled", None)
            for name in QUERIES:
                query = getattr(module, name, None)
                if callable(query):
                    reads.ambient[query] = query()
                    patch(patches, module, name, reads._watch(query))
            autograd = getattr(module, "autograd", None)
            for name in ("grad", "backward"):  # reached without a proxy method (TensorPlay)
                call = getattr(autograd, name, None)
                if callable(call):
                    patch(patches, autograd, name, _refusing_traced(call, f"autograd.{name}"))
            for name, mode in CONTEXTS.items():
                cls = getattr(module, name, None)
                if isinstance(cls, type) and hasattr(cls, "__enter__"):
                    enter, leave = _tracked(cls, mode, reads.stack)
                    patch(patches, cls, "__enter__", enter)
                    patch(patches, cls, "__exit__", leave)
        yield reads


def _refusing_traced(call: Callable[..., Any], what: str) -> Callable[..., Any]:
    from .proxy import Proxy

    def refusing(*args: Any, **kwargs: Any) -> Any:
        values = list(args) + list(kwargs.values())
        values += [v for group in values if isinstance(group, (tuple, list)) for v in group]
        if any(isinstance(v, Proxy) for v in values):
            from .context import user_location
            raise AutogradCallError(what, user_location())
        return call(*args, **kwargs)
    return refusing


def _tracked(cls: type, mode: Optional[bool], stack: List[bool]) -> Tuple[Any, Any]:
    """``cls``'s ``__enter__`` / ``__exit__`` pushing and popping the mode it sets."""
    enter, leave = cls.__enter__, cls.__exit__

    def __enter__(self: Any) -> Any:
        if mode is None:  # set_grad_enabled(mode)
            sets = bool(getattr(self, "mode", True))
        elif cls.__name__ == "inference_mode":  # inference_mode(False) changes nothing
            sets = False if getattr(self, "mode", True) else None
        else:
            sets = mode
        stack.append(sets)
        return enter(self)

    def __exit__(self: Any, *exc: Any) -> Any:
        if stack:
            stack.pop()
        return leave(self, *exc)

    return __enter__, __exit__
