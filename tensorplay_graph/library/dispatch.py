"""Device keys and framework switches for the custom-op call path.

The hot path of ``CustomOpDef.__call__`` looks up ``type(arg)`` in
``PROBES``: a class maps to a probe returning the device key of a tensor of
that class (``None`` for plain scalars).  A class missing from the table
(a tracer proxy, a container, anything unknown) sends the call down the
general path, which handles capture, nesting and subclasses and then
teaches the table the tensor classes it met.  Probes return ``SLOW`` while
the framework's profiler records, which misses the kernel table and routes
the call through the general path as well, so an idle profiler costs
nothing.

TensorPlay and torch are never imported here: their tensor classes are
registered when a module of that name is already loaded.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

from ..frameworks import framework_of

SLOW = object()  # a probe result that never matches a kernel slot


def _scalar_probe(value: Any) -> None:
    return None


PROBES: dict[type, Callable[[Any], Any]] = {
    cls: _scalar_probe for cls in (int, float, bool, complex, str, type(None))
}
# Tensor class -> framework name, and framework -> its is_grad_enabled, for
# the autograd-registered fast path (learned with PROBES).
FRAMEWORK_OF: dict[type, str] = {}
GRAD_ENABLED: dict[str, Callable[[], bool]] = {}


def _tensorplay_probe_factory() -> Callable[[Any], Any]:
    import tensorplay.library as tp_library

    def probe(tensor: Any) -> Any:
        # TensorPlay's profiler keeps this session counter (see seed library).
        if tp_library._profiling_sessions:
            return SLOW
        # get_device() is ~3x cheaper than device.type; TensorPlay has only cpu/cuda.
        return "cpu" if tensor.get_device() < 0 else "cuda"

    return probe


def _torch_probe_factory() -> Callable[[Any], Any]:
    import torch.autograd.profiler as torch_profiler

    def probe(tensor: Any) -> Any:
        if torch_profiler._is_profiler_enabled:
            return SLOW
        return "cpu" if tensor.is_cpu else tensor.device.type

    return probe


_PROBE_FACTORIES = {"tensorplay": _tensorplay_probe_factory, "torch": _torch_probe_factory}
_PROBE_CACHE: dict[str, Callable[[Any], Any]] = {}


def learn_class(value: Any) -> None:
    """Add ``type(value)`` to ``PROBES`` when it is a real tensor class."""
    framework = framework_of(value)
    if framework is None:
        return
    probe = _PROBE_CACHE.get(framework)
    if probe is None:
        probe = _PROBE_CACHE.setdefault(framework, _PROBE_FACTORIES[framework]())
    # Before any early return: the base class is probed from here on (a FakeTensor
    # learned first under AOTAutograd must not leave it without a grad-mode switch).
    GRAD_ENABLED.setdefault(framework, framework_module(framework).is_grad_enabled)
    if framework == "tensorplay":
        # TensorPlay's own tracer proxies must never be probed as tensors.
        if "Proxy" in type(value).__name__:
            return
        import tensorplay

        PROBES[tensorplay.Tensor] = probe
        FRAMEWORK_OF[tensorplay.Tensor] = framework
        PROBES.setdefault(tensorplay.DType, _scalar_probe)
    else:
        import torch

        PROBES[torch.Tensor] = probe
        FRAMEWORK_OF[torch.Tensor] = framework
        PROBES.setdefault(torch.dtype, _scalar_probe)
        PROBES.setdefault(torch.device, _scalar_probe)
        # FakeTensor and other modes dispatch through __torch_dispatch__: keep them slow.
        if type(value).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
            return
    FRAMEWORK_OF[type(value)] = framework
    PROBES[type(value)] = probe


# ---------------------------------------------------------------------------
# General-path scans
# ---------------------------------------------------------------------------

def first_tensor(values: Any) -> Any:
    """The first TensorPlay or torch tensor in ``values`` (nested lists/tuples/dicts)."""
    for value in values:
        if framework_of(value) is not None:
            return value
        if isinstance(value, (list, tuple)):
            found = first_tensor(value)
            if found is not None:
                return found
        elif isinstance(value, dict):
            found = first_tensor(value.values())
            if found is not None:
                return found
    return None


def iter_tensors(value: Any):
    """Every tensor in a nested structure, in order."""
    if framework_of(value) is not None:
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from iter_tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_tensors(item)


def device_key(tensor: Any) -> Optional[str]:
    """The dispatch key (device type) of a tensor; ``None`` for no tensor."""
    return None if tensor is None else tensor.device.type


def framework_module(framework: str) -> Any:
    """The imported module ``tensorplay`` or ``torch``."""
    return sys.modules[framework]


def grad_enabled(framework: str) -> bool:
    return bool(framework_module(framework).is_grad_enabled())


def any_requires_grad(args: tuple, kwargs: dict) -> bool:
    for tensor in iter_tensors((args, kwargs)):
        if tensor.requires_grad:
            return True
    return False


# ---------------------------------------------------------------------------
# Autocast
# ---------------------------------------------------------------------------

def autocast_enabled(framework: str, key: Optional[str]) -> bool:
    if key is None:
        return False
    try:
        return bool(framework_module(framework).is_autocast_enabled(key))
    except Exception:  # noqa: BLE001 - a device without autocast support
        return False


def autocast_disabled(framework: str, key: str):
    """A context that switches the framework's autocast off for ``key``."""
    return framework_module(framework).autocast(key, enabled=False)


def cast_floating(value: Any, framework: str, dtype_name: str) -> Any:
    """``value`` cast to ``dtype_name`` when it is a floating tensor of ``framework``."""
    if isinstance(value, (list, tuple)):
        return type(value)(cast_floating(v, framework, dtype_name) for v in value)
    if framework_of(value) != framework or not value.dtype.is_floating_point:
        return value
    target = getattr(framework_module(framework), dtype_name)
    return value if value.dtype == target else value.to(target)


# ---------------------------------------------------------------------------
# Capture
# ---------------------------------------------------------------------------

def capture_if_tracing(op: Any, args: tuple, kwargs: dict, example_fn: Callable) -> Any:
    """A proxy when a tracer (ours or TensorPlay's) records this call, else ``None``.

    Capture modules are looked up in ``sys.modules``: a tracer that was never
    imported cannot be active.
    """
    ours = sys.modules.get("tensorplay_graph.capture")
    if ours is not None and ours.capturing():
        proxy = ours.capture_call(op, args, kwargs, example_fn=example_fn)
        if proxy is not None:
            return proxy
    tp_utils = sys.modules.get("tensorplay.graph._utils")
    if tp_utils is not None and tp_utils.capturing():
        return tp_utils.capture_call(op, args, kwargs)
    return None


def contains_proxy(*values: Any) -> bool:
    """True when ``values`` hold a proxy of our tracer or of TensorPlay's."""
    ours = sys.modules.get("tensorplay_graph.capture")
    if ours is not None:
        for _ in ours.iter_proxies(values):
            return True
    tp_utils = sys.modules.get("tensorplay.graph._utils")
    if tp_utils is not None:
        for _ in tp_utils._iter_proxies(values):
            return True
    return False
