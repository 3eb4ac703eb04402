"""``torch.ops.aten.*`` call targets -> the public torch spelling a prim knows.

Dynamo graphs (and hand-written programs) may call ``torch.ops.aten.add.Tensor``
or the packet ``torch.ops.aten.relu`` directly. Prims are keyed by public
callables (``torch.add``, ``Tensor.relu``), so such nodes would stay eager.
The public builtins of torch are generated from the same native-function
schemas as the aten ops (same positional order; ``self`` is the first
argument, called ``input`` by the function and the receiver by the method),
so ``aten.X(a, b, k=v)`` is ``torch.X(a, b, k=v)`` or ``a.X(b, k=v)``. A target
is rewritten only to a builtin (never a Python wrapper, whose signature may
differ) and only when a prim then expresses the call; otherwise it stays as it
is and runs eagerly.

>>> public_call("call_function", torch.ops.aten.add.Tensor, (x, 1.0), {})   # doctest: +SKIP
('call_function', <built-in method add ...>, (x, 1.0), {})
"""

from __future__ import annotations

import types
from typing import Any, Dict, Optional, Tuple

Call = Tuple[str, Any, tuple, Dict[str, Any]]


def aten_name(target: Any) -> Optional[str]:
    """``"add"`` for ``torch.ops.aten.add`` / ``torch.ops.aten.add.Tensor``, else None."""
    from torch._ops import OpOverload, OpOverloadPacket
    if isinstance(target, OpOverload):
        packet = target.overloadpacket
    elif isinstance(target, OpOverloadPacket):
        packet = target
    else:
        return None
    qualified = getattr(packet, "_qualified_op_name", "")
    if not qualified.startswith("aten::"):
        return None
    name = qualified.split("::", 1)[1]
    return None if name.startswith("_") else name


def public_call(op: str, target: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[Call]:
    """The public spelling of an aten call that a prim expresses, or None."""
    if op != "call_function":
        return None
    name = aten_name(target)
    if name is None:
        return None
    import torch

    from .. import prims

    if "self" in kwargs and not args:  # the receiver passed by name: make it positional
        kwargs = dict(kwargs)
        args = (kwargs.pop("self"),)
    candidates = []
    for module in (torch, torch._C._nn):
        fn = getattr(module, name, None)
        if isinstance(fn, types.BuiltinFunctionType):
            candidates.append(("call_function", _functional(name, fn), args, kwargs))
    method = getattr(torch.Tensor, name, None)
    if args and type(method).__name__ == "method_descriptor":
        candidates.append(("call_method", name, args, kwargs))
    for call in candidates:
        if prims.lookup_call(*call, framework="torch") is not None:
            return call
    return None


def _functional(name: str, builtin: Any) -> Any:
    """``torch.nn.functional.X`` when it *is* the builtin (the spelling prims list)."""
    import torch.nn.functional as F
    public = getattr(F, name, None)
    return public if public is builtin else builtin
