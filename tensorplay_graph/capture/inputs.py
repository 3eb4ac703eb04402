"""The placeholders a trace starts from: one per parameter (``Tracer.trace``) or one per
tensor of the call as made (``Tracer.trace_call``)."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Tuple

from ..errors import GraphCaptureError
from .naming import placeholder_name, positional_names
from .proxy import MISSING
from .structure import bind_structure, call_key


def signature_inputs(tracer: Any, function: Callable[..., Any]) -> Tuple[tuple, dict]:
    """One placeholder per parameter of ``function`` (the seed ``Tracer.trace`` contract)."""
    positional, keyword = [], {}
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise GraphCaptureError(
                f"cannot capture *{param.name} / **{param.name} with Tracer.trace: it makes "
                "one placeholder per named parameter; use Tracer.trace_call(fn, args, kwargs) "
                "or tensorplay_graph.capture(fn, *args, **kwargs), which bind the call as made")
        if param.name in tracer.concrete_args:
            value = tracer.concrete_args[param.name]
        else:
            value = tracer.placeholder(param.name, tracer.sample_inputs.get(param.name, MISSING))
        if param.kind is param.KEYWORD_ONLY:
            keyword[param.name] = value
        else:
            positional.append(value)
    return tuple(positional), keyword


def call_inputs(tracer: Any, function: Callable[..., Any], args: tuple,
                kwargs: Dict[str, Any]) -> Tuple[tuple, dict]:
    """One placeholder per tensor of the call as made (``Tracer.trace_call``), in
    ``structure.call_key`` order; the call's structure rebuilt around them."""
    leaves: list = []
    call_key(args, kwargs, leaves)
    _, _, names = bind_structure(args, kwargs, leaves, positional_names(function, len(args)))
    proxies = [tracer.placeholder(placeholder_name(name), leaf)
               for name, leaf in zip(names, leaves)]
    new_args, new_kwargs, _ = bind_structure(args, kwargs, proxies, [])
    return new_args, new_kwargs
