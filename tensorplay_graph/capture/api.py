"""``capture()`` and ``capture_program()``: the entry points over :class:`Tracer`."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Dict

from ..errors import GraphCaptureError
from ..frameworks import framework_of
from .state import is_module
from .structure import call_key
from .tracer import Tracer


def capture(fn_or_module: Any, *example_inputs: Any, **example_kwargs: Any) -> Any:
    """Capture ``fn_or_module`` into a GraphModule, running it on ``example_inputs`` alongside.

    Example inputs bind to the leading parameters; later parameters with a
    default are baked in with that default. Without example inputs the graph
    is recorded symbolically (no ``tensor_meta``; shape queries become nodes).
    Keyword example inputs, ``*args`` / ``**kwargs`` signatures and nested
    tuples / lists / dicts of tensors bind the call as made instead
    (:meth:`Tracer.trace_call`: one placeholder per tensor, in order).

    >>> import tensorplay as tp, tensorplay_graph as tpg
    >>> gm = tpg.capture(lambda x, y: (x @ y).relu() + 1, tp.randn(4, 8), tp.randn(8, 2))
    >>> [n.op for n in gm.graph.nodes]
    ['placeholder', 'placeholder', 'call_function', 'call_method', 'call_function', 'output']
    """
    fn_or_module = _uncompiled(fn_or_module)
    function = fn_or_module.forward if is_module(fn_or_module) else fn_or_module
    all_params = inspect.signature(function).parameters.values()
    if example_kwargs or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in all_params) \
            or any(isinstance(v, (tuple, list, dict)) for v in example_inputs):
        return capture_program(fn_or_module, example_inputs, example_kwargs).graph_module
    params = [p for p in all_params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(example_inputs) > len(params):
        raise TypeError(f"capture() got {len(example_inputs)} example inputs for "
                        f"{len(params)} positional parameters of {getattr(function, '__name__', function)}")
    samples = {param.name: value for param, value in zip(params, example_inputs)}
    _check_one_framework(samples)
    concrete = {}
    if example_inputs:
        concrete = {p.name: p.default for p in params[len(example_inputs):]
                    if p.default is not p.empty}
    return Tracer(concrete_args=concrete).trace(fn_or_module, sample_inputs=samples)


def _uncompiled(fn_or_module: Any) -> Any:
    """The function or module a ``tensorplay_graph.compile`` result wraps (``explain`` /
    ``draw`` of the compiled callable): tracing the wrapper would run its compiled program on
    the tracer's values."""
    from ..compiled import CompiledFunction
    while isinstance(fn_or_module, CompiledFunction):
        fn_or_module = fn_or_module.fn
    return fn_or_module


@dataclass
class Captured:
    """What ``tensorplay_graph.compile`` keeps of one capture (see :func:`capture_program`)."""

    graph_module: Any
    #: ``capture.state`` guards: what must still hold the same objects on the next call.
    guards: list
    #: ``structure.restore`` spec giving the graph's plain output back its types.
    output_spec: Any


def capture_program(fn_or_module: Any, args: tuple, kwargs: Dict[str, Any]) -> Captured:
    """Capture ``fn_or_module(*args, **kwargs)`` as called; placeholders are the tensors
    inside ``args`` / ``kwargs`` in ``structure.call_key`` order."""
    fn_or_module = _uncompiled(fn_or_module)
    leaves: list = []
    call_key(args, kwargs, leaves)
    _check_one_framework({f"input {i}": leaf for i, leaf in enumerate(leaves)})
    tracer = Tracer()
    gm = tracer.trace_call(fn_or_module, tuple(args), dict(kwargs))
    return Captured(gm, tracer.guards, tracer.output_spec)


def _check_one_framework(samples: Dict[str, Any]) -> None:
    """One program, one tensor library: mixed inputs would fail deep inside an op."""
    seen = {}
    for name, value in samples.items():
        framework = framework_of(value)
        if framework is not None:
            seen.setdefault(framework, name)
    if len(seen) > 1:
        where = ", ".join(f"{name!r} is a {framework} tensor" for framework, name in seen.items())
        raise GraphCaptureError(
            f"example inputs mix tensor libraries ({where}); a program runs on one of them. "
            "Convert without copying: torch.from_dlpack(t) or tensorplay.from_dlpack(t)")
