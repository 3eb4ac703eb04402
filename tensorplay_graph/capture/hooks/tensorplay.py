"""TensorPlay's trace hooks (imported lazily, only when TensorPlay is in use).

TensorPlay reaches a proxy three ways, and capture uses all three (plus a
fourth hook for random calls that reach no proxy at all):

1. Its Python wrappers (``tensorplay.functional``, ``tensorplay.nn.functional``,
   ``tensorplay.library`` custom ops ...) call module-level ``_capturing()`` /
   ``_capture_call(fn, args, kwargs)`` hooks with the Python-level arguments.
   While one of our traces runs, :func:`install_hooks` points those names at
   ``tensorplay_graph.capture`` (found by identity, so no module list to keep
   current) and restores them afterwards. This yields exact, readable nodes
   (``tensorplay.functional.add(x, y, alpha=1)``) and records TensorPlay's own
   custom ops as one node.
2. Its native layer calls ``__tensorplay_function__`` with the *native*
   argument names (``exp`` gets ``self=``); :func:`resolve_function` maps such
   calls to a replayable target.
3. ``real_tensor + proxy`` raises TypeError in the native binary operators
   (they never return NotImplemented), and so does ``real_tensor *= proxy``.
   :func:`install_hooks` wraps those operators, in-place ones included, on
   ``TensorBase`` for the duration of the trace: a proxy operand lifts the real
   tensor to a graph constant and re-dispatches to the proxy (an in-place one
   then reports a write into a tensor made inside the program).
4. ``tensorplay.rand(3, 4)`` holds no proxy, so none of the above sees it;
   :func:`install_hooks` also wraps TensorPlay's public random functions so
   such calls become nodes instead of one draw frozen into a constant.
"""

from __future__ import annotations

import inspect
import sys
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Tuple

import tensorplay

from .. import context
from ..state_writes import state_write_error
from ..proxy import INPLACE_OPERATORS, Proxy
from ..randomness import record_random, should_record
from ..tracer import NO_EXAMPLE
from . import BINARY_DUNDERS

#: ``x *= proxy`` must reach the proxy too: the native ``__imul__`` raises TypeError instead
#: of returning NotImplemented, so Python never tries ``x.__mul__`` (issue 13).
_TENSOR_OPERATORS = {**BINARY_DUNDERS,
                     **{f"__{name}__": op for name, op in INPLACE_OPERATORS.items()}}

_lock = threading.Lock()
_install_depth = 0
_saved: List[Tuple[Any, str, Any]] = []


# -- 2. native-layer calls ---------------------------------------------------

def resolve_function(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[str, Any, tuple, dict]:
    """Map a ``__tensorplay_function__`` call to ``(kind, target, args, kwargs)`` of a node.

    The hook receives exactly the arguments given to the native function, so
    the native function (``tensorplay._C.<name>``) replays them exactly; the
    public ``tensorplay.functional`` wrapper is preferred when the arguments
    bind to its signature (after renaming the native ``self`` to ``input``).
    """
    name = getattr(func, "__name__", "")
    tensor_base = tensorplay._C.TensorBase
    if name and getattr(tensor_base, name, None) is func:
        if name in _TENSOR_OPERATORS:
            return "operator", _TENSOR_OPERATORS[name], tuple(args), {}
        return "call_method", name, tuple(args), dict(kwargs)
    module = getattr(func, "__module__", None) or ""
    if module == "tensorplay.functional":
        public = _bind_public(func, args, kwargs)
        if public is not None:
            return "call_function", func, public[0], public[1]
    elif module.startswith("tensorplay.") and inspect.isfunction(func) and \
            _bind_public(func, args, kwargs) is not None:
        # A Python-level function handing itself over (``F.scaled_dot_product_attention``
        # with its public argument names): replay it, not the same-named native function,
        # whose signature differs (the native one has no ``attn_mask``). A wrapper whose
        # native call arrives under the wrapper's name with the native's arguments
        # (``tensorplay.einsum(*args)`` calling ``_C.einsum(equation=, operands=, path=)``)
        # does not bind: that call replays the native function below.
        return "call_function", func, tuple(args), dict(kwargs)
    native = getattr(tensorplay._C, name, None) if name else None
    target = native if callable(native) else func
    return "call_function", target, tuple(args), dict(kwargs)


def _bind_public(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return None
    if "self" in kwargs and "self" not in params and "input" in params:
        kwargs = {("input" if key == "self" else key): value for key, value in kwargs.items()}
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except TypeError:
        return None
    return tuple(bound.args), dict(bound.kwargs)


# -- 1 and 3: hooks installed for the duration of a trace ---------------------

def _capture_call(target: Any, args: Any, kwargs: Any) -> Any:
    """Stand-in for ``tensorplay.graph.capture_call`` inside TensorPlay modules."""
    # A wrapper names itself (``_capture_call(dropout, ...)``): record the original, not our patch.
    target = getattr(target, "_tpg_random_original", target)
    example_fn = target  # a TensorPlay function: replaying it gives the example value
    if _is_custom_op(target):
        # The op's body must not run during capture: its fake (if any) gives the example.
        example_fn = getattr(target, "_fake_fn", None) or NO_EXAMPLE
    return context.capture_call(target, args, kwargs, example_fn=example_fn)


def _is_custom_op(target: Any) -> bool:
    return type(target).__module__ == "tensorplay.library"


def _make_walk(original: Any) -> Any:
    def walk_proxies(value: Any) -> Iterator[Any]:
        yield from original(value)
        yield from context.iter_proxies(value)
    return walk_proxies


def _has_proxy(values: Tuple[Any, ...]) -> bool:
    for value in values:
        if type(value) is Proxy:
            return True
        if isinstance(value, (tuple, list, slice)):
            for _ in context.iter_proxies(value):
                return True
    return False


def _make_operator(original: Any, op: Any) -> Any:
    def tensor_operator(self: Any, *args: Any) -> Any:
        if _has_proxy(args):
            tracer = context.tracer_of(args)
            return op(tracer.lift(self), *args)
        return original(self, *args)
    tensor_operator.__name__ = getattr(original, "__name__", op.__name__)
    return tensor_operator


def _capture_sites() -> List[Tuple[Any, str, Any]]:
    """``(module, name, replacement)`` for every TensorPlay module importing a capture hook."""
    graph = sys.modules.get("tensorplay.graph")
    if graph is None:
        return []
    utils = sys.modules.get("tensorplay.graph._utils")
    originals = {"_capture_call": (graph.capture_call, _capture_call),
                 "_capturing": (graph.capturing, context.capturing)}
    walk = getattr(utils, "_iter_proxies", None)
    if walk is not None:
        originals["_walk_proxies"] = (walk, _make_walk(walk))
    sites = []
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "tensorplay" or module_name.startswith("tensorplay.")):
            continue
        namespace = getattr(module, "__dict__", {})
        for attr, (original, replacement) in originals.items():
            if namespace.get(attr) is original:
                sites.append((module, attr, replacement))
    return sites


@contextmanager
def install_hooks() -> Iterator[None]:
    """Route TensorPlay's capture hooks and tensor operators to our tracer while tracing.

    Process-wide and reference-counted: nested or concurrent traces share one
    installation; code outside a trace (``capturing()`` is False there) sees
    TensorPlay's normal behaviour, only a little slower while a trace runs.
    """
    global _install_depth
    with _lock:
        if _install_depth == 0:
            _install()
        _install_depth += 1
    try:
        yield
    finally:
        with _lock:
            _install_depth -= 1
            if _install_depth == 0:
                _restore()


@contextmanager
def tracing(tracer: Any, on_module_call: Any) -> Iterator[None]:
    """Everything a trace of ``tracer`` needs from TensorPlay, for its duration.

    The capture hooks (:func:`install_hooks`); ``tensorplay.compiler.is_compiling()``
    True in this context only (a ContextVar: other threads are unaffected), as under
    ``tp.compile``; and every module called during the trace handed to
    ``on_module_call`` before its forward runs (a global forward pre-hook that
    ignores calls from other contexts).
    """
    from tensorplay.nn.modules import module as nn_module

    def pre_hook(module: Any, args: Any) -> None:
        if context.ACTIVE_TRACER.get() is tracer:
            on_module_call(module)

    compiling = getattr(sys.modules.get("tensorplay.compiler"), "_compiling", None)
    token = compiling.set(True) if compiling is not None else None
    handle = nn_module.register_module_forward_pre_hook(pre_hook)
    try:
        with install_hooks():
            yield
    finally:
        handle.remove()
        if token is not None:
            compiling.reset(token)


def _none_or_dtype(input: Any) -> Any:
    """``tensorplay.nn.functional._none_or_dtype`` that also answers for a proxy.

    The original checks ``isinstance(input, Tensor)``, which a proxy is not, so
    ``TransformerEncoderLayer(src, src_mask)`` would fail under capture.
    """
    if type(input) is Proxy:
        return input.dtype
    return _none_or_dtype.original(input)


def _proxy_aware_sites() -> List[Tuple[Any, str, Any]]:
    """TensorPlay helpers that type-check their tensor argument, replaced while tracing."""
    functional = sys.modules.get("tensorplay.nn.functional")
    original = getattr(functional, "_none_or_dtype", None)
    if original is None:
        return []
    _none_or_dtype.original = original
    return [(functional, "_none_or_dtype", _none_or_dtype)]


def _install() -> None:
    for module, attr, replacement in _capture_sites() + _random_sites() + _proxy_aware_sites():
        _saved.append((module, attr, module.__dict__[attr]))
        setattr(module, attr, replacement)
    tensor_base = tensorplay._C.TensorBase
    for name, op in _TENSOR_OPERATORS.items():
        original = tensor_base.__dict__.get(name)
        if original is None:
            continue
        _saved.append((tensor_base, name, original))
        setattr(tensor_base, name, _make_operator(getattr(tensor_base, name), op))
    done = {(owner, name) for owner, name, _ in _saved}
    for owner in (tensor_base, tensorplay.Tensor):
        for name, original in list(vars(owner).items()):
            if name.endswith("_") and not name.startswith("_") and callable(original) and \
                    (owner, name) not in done:
                _saved.append((owner, name, original))
                setattr(owner, name, _guarded_write(original))


def _guarded_write(original: Any) -> Any:
    """An in-place method that, in a trace, refuses to write a real parameter, buffer or
    global tensor the trace reads (reached through ``parameters()``, not a proxy): the write
    would happen once, at capture. torch's side: ``hooks/torch.py`` (its function mode)."""
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        tracer = context.ACTIVE_TRACER.get()
        if tracer is not None and type(self) is not Proxy and tracer.holds_state(self):
            raise state_write_error(getattr(original, "__name__", "an in-place method"))
        return original(self, *args, **kwargs)
    return write


def _restore() -> None:
    while _saved:
        owner, attr, original = _saved.pop()
        setattr(owner, attr, original)


# -- 4. random calls without a traced argument ------------------------------

#: Random functions patched while a trace runs, per public module (by attribute name).
_RANDOM_SITES = {
    "tensorplay": ("rand", "randn", "randint", "randperm", "rand_like", "randn_like",
                   "randint_like", "normal", "bernoulli", "multinomial", "poisson",
                   "dropout", "alpha_dropout", "feature_alpha_dropout"),
    "tensorplay.nn.functional": ("dropout", "dropout1d", "dropout2d", "dropout3d",
                                 "alpha_dropout", "feature_alpha_dropout", "rrelu",
                                 "gumbel_softmax"),
}


def _make_random(original: Any) -> Any:
    """``original`` recording itself as a node when called in a trace with no proxy argument.

    A patch of the public names, not TensorPlay's function-mode stack: that
    stack offers *every* call of the program to the mode, with native argument
    names (``gelu(self=x)``) that the public functions reject, so a mode would
    have to re-dispatch each op; this touches the random functions only. The
    node's target is the original function and its arguments are as called.
    Limit: a name bound before the trace (``from tensorplay import rand``)
    bypasses the patch.
    """
    def random_call(*args: Any, **kwargs: Any) -> Any:
        tracer = context.ACTIVE_TRACER.get()
        if tracer is not None and should_record(tracer, args, kwargs):
            return record_random(tracer, original, args, kwargs)
        return original(*args, **kwargs)
    random_call.__name__ = getattr(original, "__name__", "random_call")
    random_call.__doc__ = getattr(original, "__doc__", None)
    random_call.__wrapped__ = original
    random_call._tpg_random_original = original
    return random_call


def _random_sites() -> List[Tuple[Any, str, Any]]:
    """``(module, name, replacement)`` for the random functions of TensorPlay's public modules."""
    sites = []
    for module_name, names in _RANDOM_SITES.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for name in names:
            original = module.__dict__.get(name)
            if callable(original):
                sites.append((module, name, _make_random(original)))
    return sites
