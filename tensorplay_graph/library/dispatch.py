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
learned (through their adapters) from the first tensor of each met.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

from ..frameworks import adapter_for, framework_of, loaded

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


_PROBE_CACHE: dict[str, Callable[[Any], Any]] = {}


def learn_class(value: Any) -> None:
    """Add ``type(value)`` to ``PROBES`` when it is a real tensor class."""
    framework = framework_of(value)
    if framework is None:
        return
    adapter = adapter_for(framework)
    probe = _PROBE_CACHE.get(framework)
    if probe is None:
        probe = _PROBE_CACHE.setdefault(framework, adapter.device_probe(SLOW))
    # Before any early return: the base class is probed from here on (a FakeTensor
    # learned first under AOTAutograd must not leave it without a grad-mode switch).
    GRAD_ENABLED.setdefault(framework, adapter.grad_mode_query())
    is_proxy = getattr(adapter, "is_tracer_proxy_type", None)
    if is_proxy is not None and is_proxy(type(value)):
        return  # the framework's own tracer proxies must never be probed as tensors
    base = adapter.tensor_type()
    PROBES[base] = probe
    FRAMEWORK_OF[base] = framework
    for scalar_class in adapter.scalar_types():
        PROBES.setdefault(scalar_class, _scalar_probe)
    if not adapter.fast_dispatch_ok(type(value)):
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


def grad_enabled(framework: str) -> bool:
    return adapter_for(framework).is_grad_enabled()


def any_requires_grad(args: tuple, kwargs: dict) -> bool:
    for tensor in iter_tensors((args, kwargs)):
        if tensor.requires_grad:
            return True
    return False


# ---------------------------------------------------------------------------
# Autocast
# ---------------------------------------------------------------------------

def autocast_enabled(framework: str, key: Optional[str]) -> bool:
    return key is not None and adapter_for(framework).autocast_enabled(key)


def autocast_disabled(framework: str, key: str):
    """A context that switches the framework's autocast off for ``key``."""
    return adapter_for(framework).autocast_disabled(key)


def cast_floating(value: Any, framework: str, dtype_name: str) -> Any:
    """``value`` cast to ``dtype_name`` when it is a floating tensor of ``framework``."""
    if isinstance(value, (list, tuple)):
        return type(value)(cast_floating(v, framework, dtype_name) for v in value)
    if framework_of(value) != framework or not value.dtype.is_floating_point:
        return value
    target = adapter_for(framework).dtype(dtype_name)
    return value if value.dtype == target else value.to(target)


# ---------------------------------------------------------------------------
# Capture
# ---------------------------------------------------------------------------

def capture_if_tracing(op: Any, args: tuple, kwargs: dict, example_fn: Callable) -> Any:
    """A proxy when a tracer (ours or a framework's own) records this call, else ``None``.

    Our capture package is looked up in ``sys.modules``: a tracer that was never
    imported cannot be active.
    """
    ours = sys.modules.get("tensorplay_graph.capture")
    if ours is not None and ours.capturing():
        proxy = ours.capture_call(op, args, kwargs, example_fn=example_fn)
        if proxy is not None:
            return proxy
    for framework in loaded():
        proxy = adapter_for(framework).foreign_capture(op, args, kwargs)
        if proxy is not None:
            return proxy
    return None


def contains_proxy(*values: Any) -> bool:
    """True when ``values`` hold a proxy of our tracer or of a framework's own."""
    ours = sys.modules.get("tensorplay_graph.capture")
    if ours is not None:
        for _ in ours.iter_proxies(values):
            return True
    return any(adapter_for(framework).holds_foreign_proxy(values) for framework in loaded())
