"""``CompiledFunction``: what :func:`tensorplay_graph.compile` returns.

It captures the program on the first call and keeps one specialization per
input signature (shapes, dtypes, devices, strides, requires_grad of every
tensor; value of every scalar). A call with a new signature recompiles and
logs why (logger ``tensorplay_graph.compile``, level INFO); past
``options["recompile_limit"]`` specializations (default 8) it raises
:class:`RecompileLimitError`, or -- only with ``options["fallback"] ==
"eager"`` -- runs the program eagerly after a WARNING. It never switches to
eager silently.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .capture.proxy import GraphBreakError
from .capture.guards import guard_fails
from .call_keys import describe_change, shape_free
from .capture.structure import call_key, restorer
from .errors import GraphCaptureError, LoweringError, TensorPlayGraphError, UnsupportedOpError
from .fast_call import MISS, build_entry
from .frameworks import adapter_for, framework_of

logger = logging.getLogger("tensorplay_graph.compile")
recompiles_log = logging.getLogger("tensorplay_graph.recompiles")
graph_log = logging.getLogger("tensorplay_graph.graph")

DEFAULT_RECOMPILE_LIMIT = 8
#: Specializations whose generated steady-state entry is tried before the general path.
MAX_ENTRIES = 4
#: specializations kept per call key for program states seen before (train / eval modes)
MAX_PARKED = 2


class RecompileLimitError(TensorPlayGraphError, RuntimeError):
    """A compiled function saw more input signatures than ``recompile_limit`` allows."""


class Specialization:
    """One captured program: its runner, the guards it was captured under and its output types."""

    __slots__ = ("runner", "guards", "output_spec", "flat", "entry", "restore")

    def __init__(self, runner: Callable[..., Any], guards: Sequence[Any] = (),
                 output_spec: Any = None, flat: bool = True) -> None:
        self.runner, self.guards, self.output_spec = runner, list(guards), output_spec
        #: Rebuilds the typed output from the runner's plain output.
        self.restore = restorer(output_spec)
        #: The runner takes the call's tensors (``call_key`` order), else the call's args.
        self.flat = flat
        #: The generated steady-state check-and-run function (``fast_call``): None until
        #: the runner is steady, False where the call structure has none.
        self.entry: Any = None

    @property
    def lowered(self) -> Any:
        return self.runner.lowered

    @property
    def captured(self) -> Any:
        return self.runner.captured

    def __call__(self, args: tuple, leaves: List[Any]) -> Any:
        return self.restore(self.runner(*(leaves if self.flat else args)))


def _parameter_names(fn: Any) -> List[str]:
    target = getattr(fn, "forward", fn)
    try:
        return [p.name for p in inspect.signature(target).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return []


class CompiledFunction:
    """A program compiled lazily, one specialization per input signature.

    ``build(fn, args, kwargs)`` captures and compiles ``fn`` for that call and
    returns a :class:`Specialization`. ``graph_break(fn, error)`` (optional)
    returns the framework frontend's compiled ``fn`` for a program whose capture
    cannot go on (:class:`~tensorplay_graph.capture.GraphBreakError`: data-dependent
    Python, torch's higher-order ops);
    from then on every call goes there (``frontend`` / ``frontend_reason`` say so),
    unless ``fullgraph``.

    ``dynamic`` (``True``) or automatic dynamic (after the first recompile caused
    only by changed sizes): new sizes of an already seen signature are compiled
    lazily, per concrete shape, without counting against ``recompile_limit``.

    >>> f = tensorplay_graph.compile(lambda x: x.sin() * 2)   # doctest: +SKIP
    >>> f(tp.randn(4)); len(f.specializations)                # doctest: +SKIP
    1
    """

    def __init__(self, fn: Callable[..., Any], build: Callable[..., Specialization],
                 options: Optional[Dict[str, Any]] = None, *, fullgraph: bool = False,
                 dynamic: Optional[bool] = None,
                 graph_break: Optional[Callable[[Any, Exception], Callable[..., Any]]] = None
                 ) -> None:
        if not callable(fn):
            raise TypeError(f"compile() expects a function or module, got {type(fn).__name__}")
        options = dict(options or {})
        self.fn = fn
        self.options = options
        self.recompile_limit = _positive_int(options.get("recompile_limit", DEFAULT_RECOMPILE_LIMIT))
        self.fallback = options.get("fallback")
        if self.fallback not in (None, "eager", "error"):
            raise ValueError(f"options['fallback'] must be 'eager' or 'error', got {self.fallback!r}")
        self.fullgraph = fullgraph
        #: True: sizes are dynamic from the start; None: automatic; False: never.
        self.dynamic = dynamic
        self.specializations: "OrderedDict[Tuple, Specialization]" = OrderedDict()
        self.recompile_reasons: List[str] = []
        #: Which frontend captured the program: "tensorplay_graph", "dynamo" or "tensorplay".
        self.frontend = "tensorplay_graph"
        #: Why another frontend runs it (the graph break), or None.
        self.frontend_reason: Optional[str] = None
        #: How many times the program was captured (by our own tracer).
        self.captures = 0
        self._build = build
        self._graph_break = graph_break
        self._frontend_fn: Optional[Callable[..., Any]] = None
        self._eager_keys: set = set()
        self.eager_reasons: List[str] = []  # why input signatures run eagerly (explain())
        #: key -> specializations set aside when the program state they were captured under
        #: changed (at most MAX_PARKED each)
        self._parked: Dict[Tuple, List[Specialization]] = {}
        self._entries: Tuple[Callable[..., Any], ...] = ()
        self._families: set = set()      # shape-free keys counted against the limit
        self._dynamic_logged = False
        self._names = _parameter_names(fn)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        if inspect.isfunction(fn):
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Steady state: each specialization's generated check-and-run function (fast_call).
        for entry in self._entries:
            out = entry(args, kwargs)
            if out is not MISS:
                return out
        return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: Dict[str, Any]) -> Any:
        """The general path: key the call, pick or build its specialization."""
        if self._frontend_fn is not None:
            return self._frontend_fn(*args, **kwargs)
        leaves: List[Any] = []
        key = call_key(args, kwargs, leaves)
        spec = self.specializations.get(key)
        if spec is None:
            if key in self._eager_keys:
                return self.fn(*args, **kwargs)
            return self._specialize(key, args, kwargs, leaves, None)
        if spec.guards:
            stale = guard_fails(spec.guards)
            if stale is not None:
                del self.specializations[key]
                self._entries = tuple(e for e in self._entries if e.spec is not spec)
                spec = self._swap_parked(key, spec)
                if spec is None:
                    return self._specialize(key, args, kwargs, leaves, f"program state: {stale}")
                self.specializations[key] = spec
        out = spec(args, leaves)
        self._add_entry(spec, key, args, kwargs)
        return out

    def _swap_parked(self, key: Tuple, stale: Specialization) -> Optional[Specialization]:
        """Park ``stale`` (its program state changed: ``model.eval()`` after training) and
        take back a parked specialization of ``key`` whose state holds again, if any: a
        model switched between train and eval modes captures each mode once."""
        parked = self._parked.setdefault(key, [])
        found = next((p for p in parked if guard_fails(p.guards) is None), None)
        if found is not None:
            parked.remove(found)
        parked.append(stale)
        del parked[:-MAX_PARKED]
        return found

    def _add_entry(self, spec: Specialization, key: Tuple, args: tuple,
                   kwargs: Dict[str, Any]) -> None:
        """Generate ``spec``'s steady-state entry once its runner is steady; keep the
        ``MAX_ENTRIES`` most recently added ones."""
        if spec.entry is None:
            steady = getattr(spec.runner, "steady_callable", None)
            run = steady() if steady is not None else spec.runner
            if run is None:
                return  # not lowered yet: the next call decides
            eager = any(run is getattr(spec.runner, name, None) for name in ("eager", "no_grad"))
            spec.entry = build_entry(spec, args, kwargs, key, run, eager) or False
            if spec.entry:
                spec.entry.spec = spec
        if spec.entry and spec.entry not in self._entries:
            self._entries = (spec.entry,) + self._entries[:MAX_ENTRIES - 1]

    # -- compilation --------------------------------------------------------------
    def _specialize(self, key: Tuple, args: tuple, kwargs: Dict[str, Any], leaves: List[Any],
                    reason: Optional[str]) -> Any:
        family = shape_free(key)
        guard_failed = reason is not None
        if reason is None and self.specializations:
            reason = describe_change(next(reversed(self.specializations)), key, self._names)
        if family in self._families and self.dynamic is not False and not guard_failed:
            self._note_dynamic(reason)
            if self._graph_break is not None and leaves and framework_of(leaves[0]) == "torch":
                return self._symbolic_frontend(reason, args, kwargs)
        elif reason is not None:
            self.recompile_reasons.append(reason)
            counted = len(self._families) if self.dynamic else len(self.specializations)
            if counted >= self.recompile_limit:
                return self._past_limit(key, args, kwargs, reason)
            near_limit = counted + 1 >= self.recompile_limit  # the last one allowed
            recompiles_log.log(logging.WARNING if near_limit else logging.INFO,
                               "recompiling %s (specialization %d of at most %d): %s",
                               self.__name__, counted + 1, self.recompile_limit, reason)
        else:
            logger.debug("compiling %s for its first input signature", self.__name__)
        try:
            self.captures += 1
            spec = self._build(self.fn, args, kwargs)
            release_capture_memory(leaves)
            if graph_log.isEnabledFor(logging.DEBUG):
                graph_log.debug("%s: captured graph\n%s", self.__name__, spec.captured.graph)
        except GraphBreakError as exc:
            if self.fullgraph or self._graph_break is None:
                raise
            if getattr(exc, "eager_for_torch", False) or \
                    getattr(exc, "eager_for_tensorplay", False) and leaves and \
                    framework_of(leaves[0]) == "tensorplay":
                # the framework's frontend cannot follow it either (tp.compile: a tensor-indexed
                # write, a Python read of a data-dependent size): eager is the safe answer
                logger.warning("%s runs eagerly for this input signature: %s", self.__name__, exc)
                self._run_eagerly(key, exc)
                return self.fn(*args, **kwargs)
            return self._break(exc, args, kwargs, leaves)
        except (GraphCaptureError, UnsupportedOpError, LoweringError) as exc:
            if self.fallback != "eager":
                raise
            logger.warning("%s could not be compiled (%s: %s); options['fallback'] == 'eager': "
                           "running it eagerly for this input signature",
                           self.__name__, type(exc).__name__, exc)
            self._run_eagerly(key, exc)
            return self.fn(*args, **kwargs)
        self._families.add(family)
        self.specializations[key] = spec
        out = spec(args, leaves)
        self._add_entry(spec, key, args, kwargs)
        return out

    def _note_dynamic(self, reason: str) -> None:
        if self.dynamic is None:
            self.dynamic = True  # automatic dynamic: the first size change decides
        if not self._dynamic_logged:
            self._dynamic_logged = True
            recompiles_log.info("%s: sizes change between calls (%s); treating sizes as dynamic: each new "
                        "size is compiled lazily and does not count against the recompile limit",
                        self.__name__, reason)

    def _symbolic_frontend(self, reason: str, args: tuple, kwargs: Dict[str, Any]) -> Any:
        """Sizes change in a torch program: Dynamo traces it once more, with symbolic sizes and
        its own shape guards, so a program called with many lengths compiles twice in all (our
        capture, then Dynamo's) instead of once per length. Our capture answers size queries
        with numbers; a size-dependent branch would make a shape-generic copy of it wrong."""
        error = GraphCaptureError(f"sizes change between calls ({reason})")
        error.framework = "torch"  # type: ignore[attr-defined]
        frontend, compiled = self._graph_break(self.fn, error, True)
        self.frontend = frontend
        self.frontend_reason = (f"sizes change between calls ({reason}); traced once more with "
                                f"symbolic sizes")
        self._frontend_fn = compiled
        self._entries = ()
        recompiles_log.info("%s: %s through the %s frontend", self.__name__,
                            self.frontend_reason, frontend)
        return compiled(*args, **kwargs)

    def _break(self, error: Exception, args: tuple, kwargs: Dict[str, Any],
               leaves: List[Any]) -> Any:
        """Hand the whole program to the framework's own frontend (a graph break)."""
        if leaves and getattr(error, "framework", None) is None:
            error.framework = framework_of(leaves[0])
        frontend, compiled = self._graph_break(self.fn, error)
        self.frontend, self.frontend_reason = frontend, f"{type(error).__name__}: {error}"
        self._frontend_fn = compiled
        self._entries = ()
        logger.info("%s: graph break (%s); compiling it through the %s frontend with the "
                    "tensorplay_graph backend (pass fullgraph=True to get the error instead)",
                    self.__name__, error, frontend)
        return compiled(*args, **kwargs)

    def _past_limit(self, key: Tuple, args: tuple, kwargs: Dict[str, Any], reason: str) -> Any:
        message = (f"{self.__name__} hit its recompile limit ({self.recompile_limit} "
                   f"specializations); last change: {reason}")
        if self.fallback == "eager":
            logger.warning("%s; options['fallback'] == 'eager': running this input signature "
                           "eagerly", message)
            self._run_eagerly(key, RecompileLimitError(message))
            return self.fn(*args, **kwargs)
        raise RecompileLimitError(
            f"{message}. Fix: keep input shapes/dtypes stable, pass dynamic=True when only sizes "
            f"change, raise options={{'recompile_limit': N}}, or pass options={{'fallback': "
            f"'eager'}} to run new signatures eagerly past the limit")

    def explain(self) -> str:
        """Which frontend captured the program and why, and its specializations."""
        lines = [f"{self.__name__}: frontend {self.frontend}"
                 + (f" (graph break: {self.frontend_reason})" if self.frontend_reason else ""),
                 f"  captures: {self.captures}, specializations: {len(self.specializations)}, "
                 f"dynamic sizes: {bool(self.dynamic)}"]
        lines += [f"  recompiled: {reason}" for reason in self.recompile_reasons]
        lines += [f"  runs eagerly for an input signature: {reason}" for reason in self.eager_reasons]
        from .training.step import describe_training  # the compiled backward, if any
        lines += describe_training(spec.runner for spec in self.specializations.values())
        lines += [f"  specialization {i}: cuda graphs {note}"
                  for i, spec in enumerate(self.specializations.values())
                  for note in [getattr(spec.lowered, "cuda_graphs", None)] if note]
        lines += [f"  specialization {i}: {choice}"
                  for i, spec in enumerate(self.specializations.values())
                  for choice in getattr(spec.lowered, "gemm_choices", ())]
        from .passes.channels_last import layout_note
        lines += [f"  specialization {i}: memory layout {note}"
                  for i, spec in enumerate(self.specializations.values())
                  for note in [layout_note(spec.lowered)] if note]
        return "\n".join(lines)

    def _run_eagerly(self, key: Any, exc: BaseException) -> None:
        self._eager_keys.add(key)
        reason = f"{type(exc).__name__}: {exc}"
        if reason not in self.eager_reasons:
            self.eager_reasons.append(reason)

    def reset(self) -> None:
        """Drop every specialization (the next call captures again)."""
        self.specializations.clear()
        self._parked.clear()
        self._entries = ()
        self.recompile_reasons.clear()
        self._eager_keys.clear()
        self.eager_reasons.clear()
        self._families.clear()

    def _repr_html_(self) -> str:
        """Jupyter shows the plan: a drawing of the latest specialization."""
        from .drawing import compiled_html
        return compiled_html(self)

    def __repr__(self) -> str:
        return (f"<CompiledFunction {self.__name__}: {len(self.specializations)} "
                f"specialization(s), limit {self.recompile_limit}, frontend {self.frontend}>")


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"options['recompile_limit'] must be a positive int, got {value!r}")
    return value


def release_capture_memory(leaves: Sequence[Any]) -> None:
    """Give the device back what capture cached: it ran the program on real example tensors
    (a whole forward's intermediates, freed when it ended). Kept in the caching allocator, a
    block allocated later for the process's life -- a cuBLAS workspace -- lands inside one of
    those free segments and pins it (GPT-2: a 394 MB segment held by a 32 MB workspace)."""
    from .backends.cuda_graph_policy import is_cuda_tensor
    if any(is_cuda_tensor(leaf) for leaf in leaves):
        cuda = adapter_for("torch").module.cuda
        if not cuda.is_current_stream_capturing():  # freeing device memory breaks a capture
            cuda.empty_cache()
