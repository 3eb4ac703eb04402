"""Bridge to TensorPlay's native dispatcher (best effort, as the seed does).

CPU, CUDA and device-agnostic kernels are mirrored through
``tensorplay._C._register_python_op_kernel(name, slot, fn)`` so native code
and TensorPlay's compiled graphs can call the op by name; ``run_native``
calls it back through ``tensorplay._C._call_native_op``.  A build without
the bridge (or no TensorPlay at all) keeps the Python path only.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence

from ..frameworks import adapter_for

logger = logging.getLogger(__name__)

_NATIVE_SLOTS = ("cpu", "cuda")


def _c_api() -> Any:
    return adapter_for("tensorplay").native_bridge()


def _owned_by_tensorplay(name: str) -> bool:
    """True when TensorPlay's own library defines ``name``: never clobber its kernels."""
    return adapter_for("tensorplay").owns_op(name)


def mirror(name: str, keys: Optional[list], fn: Callable[..., Any]) -> bool:
    """Mirror one kernel into the native dispatcher; False when it could not be."""
    c_api = _c_api()
    bridge = getattr(c_api, "_register_python_op_kernel", None)
    if bridge is None or _owned_by_tensorplay(name):
        return False
    slots = ["default"] if keys is None else [k for k in keys if k in _NATIVE_SLOTS]
    for slot in slots:
        try:
            bridge(name, slot, fn)
        except Exception as exc:  # noqa: BLE001 - mirroring is an optimization
            logger.debug("native mirror of %s (%s) failed: %s", name, slot, exc)
            return False
    return True


def mirror_all(name: str, kernels: dict) -> None:
    """Mirror every registered kernel (TensorPlay may have loaded after registration)."""
    for key, fn in list(kernels.items()):
        mirror(name, None if key is None else [key], fn)


def run_native(name: str, kernels: dict, inputs: Sequence[Any], device_type: Optional[str]) -> list:
    """Call ``name`` through ``tensorplay._C._call_native_op``."""
    c_api = _c_api()
    if c_api is None:
        raise RuntimeError(
            f"{name}.run_native needs TensorPlay (import tensorplay first); "
            "call the op directly to use the Python dispatch path"
        )
    bridge = getattr(c_api, "_call_native_op", None)
    if bridge is None or getattr(c_api, "_register_python_op_kernel", None) is None:
        raise RuntimeError(
            f"the native custom-op bridge is unavailable in this TensorPlay build "
            f"(tensorplay._C._call_native_op missing); call {name} directly instead"
        )
    if _owned_by_tensorplay(name):
        raise RuntimeError(
            f"{name} is also defined by tensorplay.library, which owns its native "
            "kernels; rename the op to call it natively"
        )
    mirror_all(name, kernels)
    return list(bridge(name, list(inputs), device_type))
