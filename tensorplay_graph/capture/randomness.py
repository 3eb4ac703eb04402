"""Random calls with no traced argument, and the RNG state around a capture.

A call like ``torch.rand(3, 4)`` or ``tensorplay.randn(x.shape)`` holds no
proxy, so no tensor hook sees it: run eagerly, it would be one draw frozen into
the graph as a ``get_attr`` constant, and every call of the compiled program
would return the same "random" values. Each framework's trace hooks therefore
install a function mode for the duration of a trace (``random_mode``) that
sends such calls here, to be recorded as a ``call_function`` node (a ``random``
barrier once normalized). Deterministic factories (``zeros``, ``arange``) are
left alone: a constant is the right answer for them.

Capture never draws from the framework's global random stream, nor saves and
restores it (that would replay numbers other threads drew meanwhile): the example
value of a random call is a zero tensor with the metadata its prim rule gives
(:func:`example_without_drawing`); random in-place methods on a traced tensor
(``x.uniform_()``) leave the example as it is. Examples only carry metadata, and
``manual_seed(s); compiled(x)`` then equals ``manual_seed(s); fn(x)`` from the first
call on, whatever other threads do.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from ..frameworks import adapter_for, registered
from ..ir.node import map_arg
from .context import ACTIVE_TRACER, iter_proxies


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


#: In-place random methods: their example is the (private) input, unchanged.
RANDOM_INPLACE_METHODS = frozenset({"uniform_", "normal_", "bernoulli_", "random_",
                                    "exponential_", "geometric_", "cauchy_", "log_normal_"})

#: Returned by :func:`example_without_drawing` for calls that draw nothing.
NOT_RANDOM = object()


def example_without_drawing(node: Any, framework: Optional[str], example_args: tuple) -> Any:
    """The example value of a random node, made without drawing; ``NOT_RANDOM`` otherwise.

    ``MISSING`` (unknown, learned on the compiled program's first call) when the prim's
    meta rule cannot say. The prim is found by name: the lookup tables must not be built
    while capture hooks replace TensorPlay's random functions.
    """
    if node.op == "call_method" and node.target in RANDOM_INPLACE_METHODS:
        return example_args[0]
    prim = _random_prim(node)
    if prim is None or framework is None:
        return NOT_RANDOM
    from .. import prims
    from .proxy import MISSING

    prim_args = prims.canonical_args(prim, node.args, node.kwargs)
    if prim_args is None:
        return MISSING
    if not prim.flags_apply(prim_args):
        return NOT_RANDOM  # dropout(training=False): draws nothing
    try:
        meta = prim.meta(**map_arg(prim_args, lambda n: n.meta.get("tensor_meta")))
        return zeros_like_meta(meta, framework)
    except Exception:  # noqa: BLE001 - an unknown input meta or an odd overload
        return MISSING


def _random_prim(node: Any) -> Any:
    from .. import prims
    from ..errors import UnsupportedOpError

    target = node.target
    if node.op == "call_function":
        module = getattr(target, "__module__", None) or "tensorplay"  # TensorPlay's C functions
        if module.split(".")[0] not in registered():
            return None
        target = getattr(target, "__name__", None)
    if not isinstance(target, str):
        return None
    try:
        prim = prims.get(target)
    except UnsupportedOpError:
        return None
    return prim if prim.random else None


def zeros_like_meta(meta: Any, framework: str) -> Any:
    """A zero tensor with ``meta``'s shape, dtype and device."""
    return adapter_for(framework).zeros(meta.shape, meta.dtype, device=meta.device)
