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

from .errors import GraphCaptureError, LoweringError, TensorPlayGraphError, UnsupportedOpError
from .frameworks import dtype_name, framework_of

logger = logging.getLogger("tensorplay_graph.compile")

DEFAULT_RECOMPILE_LIMIT = 8
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_TENSOR_FIELDS = ("framework", "shape", "dtype", "device", "stride", "requires_grad")


class RecompileLimitError(TensorPlayGraphError, RuntimeError):
    """A compiled function saw more input signatures than ``recompile_limit`` allows."""


# type -> framework name (or None): one dict hit per argument on the call path.
_FRAMEWORK_OF_TYPE: Dict[type, Optional[str]] = {}


def _framework_of_type(value: Any) -> Optional[str]:
    cls = type(value)
    try:
        return _FRAMEWORK_OF_TYPE[cls]
    except KeyError:
        framework = framework_of(value)
        if framework is not None or cls.__module__.split(".")[0] not in ("tensorplay", "torch"):
            # Only cache negatives for types no framework can claim later on import.
            _FRAMEWORK_OF_TYPE[cls] = framework
        return framework


def value_key(value: Any) -> Any:
    """The part of a specialization key that one argument contributes.

    Tensors key on the framework's own (hashable) shape, dtype and device objects:
    no string conversion on the call path; :func:`describe_change` formats them.
    """
    framework = _framework_of_type(value)
    if framework is not None:
        return ("tensor", framework, value.shape, value.dtype, value.device,
                value.stride(), value.requires_grad)
    if isinstance(value, _SCALARS):
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(value_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, value_key(v)) for k, v in value.items()))
    # Any other object is baked into the capture as a constant: key on identity.
    return ("object", type(value).__qualname__, id(value))


def _readable(field: str, value: Any) -> Any:
    if field == "dtype":
        return dtype_name(value)
    if field in ("shape", "stride"):
        return tuple(value)
    return str(value) if field == "device" else value


def describe_change(old: Tuple, new: Tuple, names: Sequence[str]) -> str:
    """Human-readable difference between two specialization keys."""
    if len(old) != len(new):
        return f"number of arguments changed from {len(old)} to {len(new)}"
    changes: List[str] = []
    for i, (a, b) in enumerate(zip(old, new)):
        if a == b:
            continue
        label = f"argument {i} ({names[i]})" if i < len(names) else f"argument {i}"
        if a[0] == b[0] == "tensor":
            fields = [f"{field} {_readable(field, x)} -> {_readable(field, y)}"
                      for field, x, y in zip(_TENSOR_FIELDS, a[1:], b[1:]) if x != y]
            changes.append(f"{label}: " + ", ".join(fields))
        else:
            changes.append(f"{label}: {_short(a)} -> {_short(b)}")
    return "; ".join(changes) or "guard mismatch"


def _short(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
        return f"{key[0]} {key[1]!r}"
    return repr(key)


def _parameter_names(fn: Any) -> List[str]:
    target = getattr(fn, "forward", fn)
    try:
        return [p.name for p in inspect.signature(target).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return []


class CompiledFunction:
    """A program compiled lazily, one specialization per input signature.

    ``build(fn, args)`` captures and compiles ``fn`` for ``args`` and returns
    the callable that runs it (a :class:`~tensorplay_graph.autograd_regions.GraphRunner`).

    >>> f = tensorplay_graph.compile(lambda x: x.sin() * 2)   # doctest: +SKIP
    >>> f(tp.randn(4)); len(f.specializations)                # doctest: +SKIP
    1
    """

    def __init__(self, fn: Callable[..., Any], build: Callable[[Any, tuple], Callable[..., Any]],
                 options: Optional[Dict[str, Any]] = None) -> None:
        if not callable(fn):
            raise TypeError(f"compile() expects a function or module, got {type(fn).__name__}")
        options = dict(options or {})
        self.fn = fn
        self.options = options
        self.recompile_limit = _positive_int(options.get("recompile_limit", DEFAULT_RECOMPILE_LIMIT))
        self.fallback = options.get("fallback")
        if self.fallback not in (None, "eager", "error"):
            raise ValueError(f"options['fallback'] must be 'eager' or 'error', got {self.fallback!r}")
        self.specializations: "OrderedDict[Tuple, Callable[..., Any]]" = OrderedDict()
        self.recompile_reasons: List[str] = []
        self._build = build
        self._eager_keys: set = set()
        self._names = _parameter_names(fn)
        self._signature = _signature_or_none(fn)
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        if inspect.isfunction(fn):
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = self._bind(args, kwargs)
        key = tuple(map(value_key, args))
        runner = self.specializations.get(key)
        if runner is None:
            if key in self._eager_keys:
                return self.fn(*args)
            runner = self._specialize(key, args)
        return runner(*args)

    # -- compilation --------------------------------------------------------------
    def _specialize(self, key: Tuple, args: tuple) -> Callable[..., Any]:
        if self.specializations:
            last = next(reversed(self.specializations))
            reason = describe_change(last, key, self._names)
            self.recompile_reasons.append(reason)
            if len(self.specializations) >= self.recompile_limit:
                return self._past_limit(key, args, reason)
            logger.info("recompiling %s (specialization %d of at most %d): %s",
                        self.__name__, len(self.specializations) + 1, self.recompile_limit, reason)
        else:
            logger.debug("compiling %s for its first input signature", self.__name__)
        try:
            runner = self._build(self.fn, args)
        except (GraphCaptureError, UnsupportedOpError, LoweringError) as exc:
            if self.fallback != "eager":
                raise
            logger.warning("%s could not be compiled (%s: %s); options['fallback'] == 'eager': "
                           "running it eagerly for this input signature",
                           self.__name__, type(exc).__name__, exc)
            self._eager_keys.add(key)
            return self.fn
        self.specializations[key] = runner
        return runner

    def _past_limit(self, key: Tuple, args: tuple, reason: str) -> Callable[..., Any]:
        message = (f"{self.__name__} hit its recompile limit ({self.recompile_limit} "
                   f"specializations); last change: {reason}")
        if self.fallback == "eager":
            logger.warning("%s; options['fallback'] == 'eager': running this input signature "
                           "eagerly", message)
            self._eager_keys.add(key)
            return self.fn
        raise RecompileLimitError(
            f"{message}. Fix: keep input shapes/dtypes stable, raise "
            f"options={{'recompile_limit': N}}, or pass options={{'fallback': 'eager'}} to run "
            f"new signatures eagerly past the limit")

    def _bind(self, args: tuple, kwargs: Dict[str, Any]) -> tuple:
        if self._signature is None:
            raise TypeError(f"{self.__name__}: cannot bind keyword arguments "
                            f"{sorted(kwargs)}; pass them positionally")
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if bound.kwargs:
            raise TypeError(f"{self.__name__}: keyword-only arguments {sorted(bound.kwargs)} are "
                            f"not supported by compile(); make them positional")
        return tuple(bound.args)

    def reset(self) -> None:
        """Drop every specialization (the next call captures again)."""
        self.specializations.clear()
        self.recompile_reasons.clear()
        self._eager_keys.clear()

    def __repr__(self) -> str:
        return (f"<CompiledFunction {self.__name__}: {len(self.specializations)} "
                f"specialization(s), limit {self.recompile_limit}>")


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"options['recompile_limit'] must be a positive int, got {value!r}")
    return value


def _signature_or_none(fn: Any) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(getattr(fn, "forward", fn))
    except (TypeError, ValueError):
        return None
