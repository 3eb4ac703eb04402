"""torch specifics of capture (imported lazily, only when torch calls a proxy).

torch hands ``__torch_function__`` the public callable and the arguments as
the user passed them, so replaying ``func(*args, **kwargs)`` is exact. Tensor
methods (``x.add(p)``, and ``x + p`` which torch routes to ``Tensor.add``)
become ``call_method`` nodes; slot dunders (``x[p]``) become ``operator``
calls on the lifted tensor.
"""

from __future__ import annotations

import operator
from typing import Any, Dict, Tuple

import torch

_DUNDER_OPERATORS = {
    "__getitem__": operator.getitem, "__setitem__": operator.setitem,
    "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
    "__truediv__": operator.truediv, "__floordiv__": operator.floordiv,
    "__mod__": operator.mod, "__pow__": operator.pow, "__matmul__": operator.matmul,
    "__and__": operator.and_, "__or__": operator.or_, "__xor__": operator.xor,
    "__lshift__": operator.lshift, "__rshift__": operator.rshift,
    "__lt__": operator.lt, "__le__": operator.le, "__gt__": operator.gt,
    "__ge__": operator.ge, "__eq__": operator.eq, "__ne__": operator.ne,
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


def tensor_type() -> type:
    return torch.Tensor


def module_type() -> type:
    return torch.nn.Module


def clone(tensor: Any) -> Any:
    """A private copy of an example input (in-place ops during capture must not touch it)."""
    return tensor.detach().clone()
