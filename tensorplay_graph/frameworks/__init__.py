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


def framework_of(value: Any) -> Optional[str]:
    """``"tensorplay"``, ``"torch"`` or ``None`` for a non-tensor value."""
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


def dtype_name(dtype: Any) -> str:
    """Canonical dtype string (``"float32"``) of a TensorPlay or torch dtype."""
    text = str(dtype)
    return text.rsplit(".", 1)[-1]


def device_type(value: Any) -> Optional[str]:
    """Device type (``"cpu"``, ``"cuda"``) of a tensor, or ``None`` for non-tensors."""
    if framework_of(value) is None:
        return None
    return value.device.type


def tensor_meta(value: Any) -> TensorMeta:
    """The ``TensorMeta`` of a real TensorPlay or torch tensor."""
    return TensorMeta(
        shape=tuple(value.shape),
        dtype=dtype_name(value.dtype),
        device=str(value.device),
        stride=tuple(value.stride()),
        requires_grad=bool(getattr(value, "requires_grad", False)),
    )


def adapter(framework: str) -> ModuleType:
    """The module holding a framework's capture specifics (``frameworks.tensorplay`` / ``.torch``)."""
    return importlib.import_module(f"{__name__}.{framework}")


def private_copy(value: Any) -> Any:
    """A detached copy of a tensor (writes to it never reach ``value``); other values unchanged."""
    framework = framework_of(value)
    return value if framework is None else adapter(framework).clone(value)
