"""The one door to TensorPlay and torch: framework adapters and detection.

Every call into an eager framework goes through its adapter
(:class:`~.base.FrameworkAdapter`, one module per framework: ``tensorplay.py``,
``torch.py``); ``adapter_for(value_or_name)`` finds it. ``tensorplay_graph`` must import
with neither framework present, so tensors are recognised without importing one: if a
framework was never imported, no value can be one of its tensors.

Adding a framework: one module in this package assigning a ``FrameworkAdapter`` to
``ADAPTER`` (found by :func:`registered`, nothing to list), and its trace hooks in
``capture/hooks/<name>.py``.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Dict, Optional, Tuple, Union

from ..ir.meta import TensorMeta
from .base import FrameworkAdapter

__all__ = ["FrameworkAdapter", "adapter_for", "registered", "loaded", "framework_of",
           "is_tensor", "is_parameter", "dtype_name", "device_type", "tensor_meta", "private_copy"]

#: framework name -> its adapter, filled once from this package's modules (by name order).
_ADAPTERS: Dict[str, FrameworkAdapter] = {}


def _discover() -> Dict[str, FrameworkAdapter]:
    if not _ADAPTERS:
        found = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            adapter = getattr(importlib.import_module(f"{__name__}.{info.name}"), "ADAPTER", None)
            if isinstance(adapter, FrameworkAdapter):
                found[adapter.name] = adapter
        _ADAPTERS.update(found)  # at once: another thread never sees half the adapters
    return _ADAPTERS


def registered() -> Tuple[str, ...]:
    """The names of every framework with an adapter (imported or not)."""
    return tuple(_discover())


def _adapter(name: str) -> FrameworkAdapter:
    found = _ADAPTERS.get(name) or _discover().get(name)
    if found is None:
        raise ValueError(f"no framework adapter for {name!r}; known frameworks: "
                         f"{', '.join(_ADAPTERS)} (add one in tensorplay_graph/frameworks/)")
    return found


def adapter_for(value_or_name: Union[str, Any]) -> FrameworkAdapter:
    """The adapter of a framework name (``"torch"``) or of a tensor's framework.

    ValueError for an unknown name or a value that is no tensor of a known framework.
    """
    if isinstance(value_or_name, str):
        return _adapter(value_or_name)
    name = framework_of(value_or_name)
    if name is None:
        raise ValueError(f"{type(value_or_name).__name__} is not a tensor of a known framework "
                         f"({', '.join(registered())}); pass a tensor or a framework name")
    return _adapter(name)


def loaded() -> Tuple[str, ...]:
    """The frameworks imported so far (no value can be a tensor of the others)."""
    return tuple(name for name, adapter in _discover().items() if adapter.loaded())


#: type -> its framework (or None). Sound to keep: a type that existed before a
#: framework was imported cannot subclass that framework's tensor.
_BY_TYPE: dict = {}
_UNSEEN = object()


def framework_of(value: Any) -> Optional[str]:
    """The framework name of a tensor (``"tensorplay"``, ``"torch"``); ``None`` for other values."""
    cls = type(value)
    found = _BY_TYPE.get(cls, _UNSEEN)
    if found is _UNSEEN:
        found = _framework_of_type(value)
        if len(_BY_TYPE) < 4096:  # bounded even for programs that make classes on the fly
            _BY_TYPE[cls] = found
    return found


def _framework_of_type(value: Any) -> Optional[str]:
    for name, adapter in _discover().items():
        if adapter.is_tensor(value):
            return name
    return None


def is_tensor(value: Any) -> bool:
    """True for a TensorPlay or torch tensor."""
    return framework_of(value) is not None


def is_parameter(value: Any) -> bool:
    """True for a module parameter of either library (``nn.Parameter`` or a subclass;
    TensorPlay also marks them ``_is_param``)."""
    return bool(getattr(value, "_is_param", False)) or \
        any(cls.__name__ == "Parameter" for cls in type(value).__mro__)


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
    copy = _adapter(framework).clone(value)
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


def __dir__() -> list:
    return list(__all__)
