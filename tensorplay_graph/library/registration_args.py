"""Arguments of ``register_kernel`` / ``register_autocast``, parsed into what ``CustomOpDef``
stores: kernel slots (device types) and autocast dtype names."""

from __future__ import annotations

from typing import Any, Optional

from ..ir.meta import FLOATING_DTYPES
from .schema import is_composite, normalize_device_types

__all__ = ["kernel_keys", "dtype_name"]


def kernel_keys(device_types: Any) -> Optional[list]:
    """Slots of ``register_kernel``: ``None`` is the device-agnostic slot."""
    if device_types is None or is_composite(device_types):
        return None
    if isinstance(device_types, str):
        return [device_types.lower()]
    keys = [None if (d is None or is_composite(d)) else d for d in device_types]
    if not keys:
        return None
    strings = normalize_device_types([k for k in keys if k is not None]) or []
    return ([None] if None in keys else []) + strings


def dtype_name(cast_inputs: Any) -> str:
    """The floating dtype name of a TensorPlay/torch dtype or of a string."""
    if isinstance(cast_inputs, str):
        name = cast_inputs.rsplit(".", 1)[-1]
        floating = name in FLOATING_DTYPES
    else:
        name = str(cast_inputs).rsplit(".", 1)[-1]
        floating = getattr(cast_inputs, "is_floating_point", False) is True
    if not floating:
        raise TypeError(f"cast_inputs must be a floating-point dtype, got {cast_inputs!r}")
    return name
