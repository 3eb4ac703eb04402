"""Framework detection without importing a framework.

``tensorplay_graph`` must import with neither TensorPlay nor torch present, so
tensors are recognised through ``sys.modules``: if a framework was never
imported, no value can be one of its tensors.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, Optional

from ..ir.meta import TensorMeta


def _tensor_class(module_name: str) -> Optional[type]:
    module = sys.modules.get(module_name)
    return getattr(module, "Tensor", None) if module is not None else None


#: type -> its framework (or None). Sound to keep: a type that existed before a
#: framework was imported cannot subclass that framework's tensor.
_BY_TYPE: dict = {}
_UNSEEN = object()


def framework_of(value: Any) -> Optional[str]:
    """``"tensorplay"``, ``"torch"`` or ``None`` for a non-tensor value."""
    cls = type(value)
    found = _BY_TYPE.get(cls, _UNSEEN)
    if found is _UNSEEN:
        found = _framework_of_type(value)
        if len(_BY_TYPE) < 4096:  # bounded even for programs that make classes on the fly
            _BY_TYPE[cls] = found
    return found


def _framework_of_type(value: Any) -> Optional[str]:
    tp_tensor = _tensor_class("tensorplay")
    if tp_tensor is not None and isinstance(value, tp_tensor):
        return "tensorplay"
    torch_tensor = _tensor_class("torch")
    if torch_tensor is not None and isinstance(value, torch_tensor):
        return "torch"
    return None


def is_tensor(value: Any) -> bool:
    """True for a TensorPlay or torch tensor."""
    return framework_of(value) is not None


#: (type, dtype or device) -> its string: asked once per captured node. Keyed by type too:
#: one library's dtype never equals another's.
_NAMES: dict = {}


def _name(value: Any, last_atom: bool) -> str:
    key = (type(value), value)
    try:
        return _NAMES[key]
    except (KeyError, TypeError):
        text = str(value).rsplit(".", 1)[-1] if last_atom else str(value)
    try:
        _NAMES[key] = text
    except TypeError:  # unhashable: not cached
        pass
    return text


def dtype_name(dtype: Any) -> str:
    """Canonical dtype string (``"float32"``) of a TensorPlay or torch dtype."""
    return _name(dtype, True)


def device_type(value: Any) -> Optional[str]:
    """Device type (``"cpu"``, ``"cuda"``) of a tensor, or ``None`` for non-tensors."""
    if framework_of(value) is None:
        return None
    return value.device.type


#: (tensor type, shape, stride, dtype, device, requires_grad) -> its TensorMeta. Capture
#: asks once per node and programs repeat a few layouts; a TensorMeta is immutable.
_INTERNED: dict = {}


def tensor_meta(value: Any) -> TensorMeta:
    """The ``TensorMeta`` of a real TensorPlay or torch tensor."""
    try:
        key = (type(value), value.shape, value.stride(), value.dtype, value.device,
               value.requires_grad)
        return _INTERNED[key]
    except KeyError:
        pass
    except (TypeError, AttributeError, RuntimeError):  # symbolic sizes are unhashable
        key = None
    meta = _tensor_meta(value)
    if key is not None:
        if len(_INTERNED) >= 4096:
            _INTERNED.clear()
        _INTERNED[key] = meta
    return meta


def _tensor_meta(value: Any) -> TensorMeta:
    # int() raises on symbolic sizes (the importers rely on it): no static meta for those.
    return TensorMeta.of_ints(tuple(map(int, value.shape)), _name(value.dtype, True),
                              _name(value.device, False), tuple(map(int, value.stride())),
                              bool(getattr(value, "requires_grad", False)))


def adapter(framework: str) -> ModuleType:
    """The module holding a framework's capture specifics (``frameworks.tensorplay`` / ``.torch``)."""
    return importlib.import_module(f"{__name__}.{framework}")


def private_copy(value: Any) -> Any:
    """A detached copy of a tensor (writes to it never reach ``value``) with its exact
    strides; other values unchanged.

    ``clone()`` makes a non-dense tensor (``x[..., ::2]``) row-major, and layout is
    observable during capture: torch's in-place overlap check compares strides, so
    ``x[..., ::2].add_(x)`` on a size-1 last dim passes on the strided input and raises
    on a row-major copy. Such a tensor is copied with the memory span it covers, and so is
    one whose clone misreports ``is_contiguous()`` (TensorPlay 1.0.0: a clone of a permuted
    tensor says True, so ``contiguous()`` returns it and a later ``view`` raises).
    """
    framework = framework_of(value)
    if framework is None:
        return value
    copy = adapter(framework).clone(value)
    try:
        stride = tuple(value.stride())
        if copy.numel() == 0 or (tuple(copy.stride()) == stride and
                                 copy.is_contiguous() == value.is_contiguous()):
            return copy
        span = 1 + sum((n - 1) * s for n, s in zip(value.shape, stride))
        flat = value.detach().as_strided((span,), (1,)).clone()
    except (RuntimeError, TypeError, AttributeError):  # no strides (sparse, symbolic sizes)
        return copy
    return flat.as_strided(tuple(value.shape), stride)
