"""torch's trace hooks (imported lazily, only when torch is in use).

torch hands ``__torch_function__`` the public callable and the arguments as
the user passed them, so replaying ``func(*args, **kwargs)`` is exact. Tensor
methods (``x.add(p)``, and ``x + p`` which torch routes to ``Tensor.add``)
become ``call_method`` nodes; slot dunders (``x[p]``) become ``operator``
calls on the lifted tensor.
"""

from __future__ import annotations

import operator
import threading
import warnings
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Dict, FrozenSet, Iterator, Tuple

import torch
from torch.overrides import TorchFunctionMode

from .. import context
from ..state_writes import state_write_error
from ..proxy import Proxy
from ..randomness import record_random, should_record
from . import BINARY_DUNDERS

_DUNDER_OPERATORS = {
    **BINARY_DUNDERS,
    "__neg__": operator.neg, "__pos__": operator.pos, "__invert__": operator.invert,
    "__abs__": operator.abs,
}


def _reflected(name: str) -> Any:
    """``operator`` function of a reflected dunder (``__rsub__`` -> ``operator.sub``)."""
    if name.startswith("__r") and f"__{name[3:]}" in _DUNDER_OPERATORS:
        return _DUNDER_OPERATORS[f"__{name[3:]}"]
    return None


def resolve_function(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[str, Any, tuple, dict]:
    """Map a ``__torch_function__`` call to ``(kind, target, args, kwargs)`` of a node."""
    name = getattr(func, "__name__", "")
    if name and getattr(torch.Tensor, name, None) is func:
        if name in _DUNDER_OPERATORS:
            return "operator", _DUNDER_OPERATORS[name], tuple(args), {}
        reflected = _reflected(name)
        if reflected is not None:
            return "operator", reflected, (args[1], args[0]), {}
        return "call_method", name, tuple(args), dict(kwargs)
    return "call_function", func, tuple(args), dict(kwargs)


# -- what libraries see while a trace runs -------------------------------------

_flag_lock = threading.Lock()
_flag_depth = 0
_original_is_compiling: Any = None


def _is_compiling() -> bool:
    """``torch.compiler.is_compiling()``, True also inside a tensorplay_graph trace."""
    return context.capturing() or _original_is_compiling()


@contextmanager
def tracing(tracer: Any, on_module_call: Any) -> Iterator[None]:
    """What a trace of ``tracer`` needs from torch, for its duration.

    ``torch.compiler.is_compiling()`` (and so ``torch._dynamo.is_compiling()`` and
    transformers' ``is_torchdynamo_compiling()`` / ``is_tracing()``) answers True in
    this context, so libraries take their trace-friendly branches as under Dynamo.
    The function is replaced while any trace runs, but answers True only where
    ``capturing()`` is (a ContextVar): other threads see torch's own answer. Code that
    bound the function before (``from torch.compiler import is_compiling``) is not
    reached. Every module called during the trace goes to ``on_module_call`` first.
    """
    global _flag_depth, _original_is_compiling

    def pre_hook(module: Any, args: Any) -> None:
        if context.ACTIVE_TRACER.get() is tracer:
            on_module_call(module)

    with _flag_lock:
        if _flag_depth == 0:
            _original_is_compiling = torch.compiler.is_compiling
            torch.compiler.is_compiling = _is_compiling
        _flag_depth += 1
    handle = torch.nn.modules.module.register_module_forward_pre_hook(pre_hook)
    try:
        yield
    finally:
        handle.remove()
        with _flag_lock:
            _flag_depth -= 1
            if _flag_depth == 0:
                torch.compiler.is_compiling = _original_is_compiling


# -- random calls without a traced argument -----------------------------------

#: ``torch`` functions that draw random numbers (``torch.rand(3)`` has no tensor to hook).
_RANDOM_TORCH = ("rand", "randn", "randint", "randperm", "rand_like", "randn_like",
                 "randint_like", "normal", "bernoulli", "multinomial", "poisson", "dropout",
                 "alpha_dropout", "feature_alpha_dropout")
_RANDOM_FUNCTIONAL = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                      "feature_alpha_dropout", "rrelu", "gumbel_softmax")


@lru_cache(maxsize=1)
def random_functions() -> FrozenSet[Any]:
    """The random functions of torch, by identity (the callables a function mode receives)."""
    import torch.nn.functional as F

    found = [getattr(torch, name, None) for name in _RANDOM_TORCH]
    found += [getattr(F, name, None) for name in _RANDOM_FUNCTIONAL]
    return frozenset(fn for fn in found if callable(fn))


_PROXY_ONLY = (Proxy,)


class _RandomCallMode(TorchFunctionMode):
    """Records random calls that hold no proxy; every other call runs as it would.

    A ``TorchFunctionMode`` rather than patching ``torch.rand`` & co.: the mode
    sees every torch call however it was reached (``from torch import rand``,
    ``torch.nn.init``-style helpers, aliases), is scoped to this thread and this
    trace, and needs nothing restored if the program raises. Inside the handler
    torch disables the mode, so forwarding ``func(*args)`` reaches the
    ``Proxy.__torch_function__`` hook exactly as without the mode.
    """

    def __init__(self, tracer: Any) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if types == _PROXY_ONLY:
            # A proxy is the only overloaded argument: its hook is what forwarding would
            # reach, called directly (one torch argument parse per captured call, not two).
            return Proxy.__torch_function__(func, types, args, kwargs)
        if func in random_functions() and should_record(self.tracer, args, kwargs):
            return record_random(self.tracer, func, args, kwargs)
        written = _written(func, args, kwargs)
        if written is not None and self.tracer.holds_state(written):
            # before the write: it would change the caller's parameter at capture only
            raise state_write_error(getattr(func, "__name__", str(func)))
        if getattr(func, "__name__", None) == "__getitem__":
            # ``real_tensor[proxy]``: torch first probes the proxy as a sequence index and
            # warns about that deprecated form before dispatching to the proxy's hook,
            # which records the getitem; the warning says nothing about the user's code.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Using a non-tuple sequence")
                return func(*args, **kwargs)
        return func(*args, **kwargs)


_INPLACE_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                              "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__",
                              "__ixor__", "__ilshift__", "__irshift__", "__imatmul__"})


def _written(func: Any, args: Any, kwargs: Dict[str, Any]) -> Any:
    """The real tensor a call without proxies writes into (``out=``, ``add_``, ``t[i] = v``),
    or None."""
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor):
        return out
    name = getattr(func, "__name__", "") or ""
    if args and isinstance(args[0], torch.Tensor) and (
            (name.endswith("_") and not name.endswith("__")) or name in _INPLACE_DUNDERS):
        return args[0]
    return None


def random_mode(tracer: Any) -> _RandomCallMode:
    """A context manager recording random torch calls without a proxy as nodes of ``tracer``."""
    return _RandomCallMode(tracer)


def pause_mode(mode: Any) -> bool:
    """Take ``mode`` off the top of torch's function-mode stack; False if it is not on top.

    While capture computes an example value and reads its metadata the random
    mode would pass every call through unchanged (a real draw), yet each tensor
    call and attribute read would still pay a Python ``__torch_function__`` round
    trip (~5 per captured node). :func:`resume_mode` puts it back.
    """
    depth = torch._C._len_torch_function_stack()
    if depth and torch._C._get_function_stack_at(depth - 1) is mode:
        torch._C._pop_torch_function_stack()
        return True
    return False


def resume_mode(mode: Any) -> None:
    torch._C._push_on_torch_function_stack(mode)
