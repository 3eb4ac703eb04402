"""The framework adapter: everything the compiler asks of an eager tensor framework.

One adapter per framework (``frameworks/tensorplay.py``, ``frameworks/torch.py``) is the
only door to that framework; the trace hooks that patch it while capture runs live in
``capture/hooks/<name>.py``. An adapter imports its framework lazily (``module``), so
importing an adapter costs nothing and ``loaded()`` asks without importing.

Methods with a body here are optional: the default states what a framework without the
feature does (no native dispatcher, no profiler, no Dynamo ...). The abstract ones are
what every framework must answer.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from abc import ABC, abstractmethod
from types import ModuleType
from typing import Any, Callable, ContextManager, Optional, Sequence, Tuple

__all__ = ["FrameworkAdapter"]


class FrameworkAdapter(ABC):
    """One eager framework (``name`` is also its top-level module's name)."""

    #: The framework's name and top-level module (``"torch"``).
    name: str = ""

    # -- presence and modules ----------------------------------------------------------

    def loaded(self) -> bool:
        """True when the framework was imported (no value can be its tensor before)."""
        return sys.modules.get(self.name) is not None

    @property
    def module(self) -> ModuleType:
        """The framework's top-level module, imported on first use."""
        module = sys.modules.get(self.name)
        return module if module is not None else importlib.import_module(self.name)

    def owns(self, module_name: str) -> bool:
        """True when ``module_name`` is the framework's module or one of its submodules."""
        return module_name == self.name or module_name.startswith(self.name + ".")

    def defines(self, target: Any) -> bool:
        """True when a graph's call target is one of the framework's callables."""
        return self.owns(getattr(target, "__module__", None) or "")

    def loaded_module(self, module_name: str) -> Optional[ModuleType]:
        """The framework's submodule ``module_name`` if already imported, else None (no import)."""
        if not self.owns(module_name):
            raise ValueError(f"{module_name!r} is not a module of {self.name}")
        return sys.modules.get(module_name)

    def import_module(self, module_name: str) -> Optional[ModuleType]:
        """Import the framework's submodule ``module_name``; None when this build lacks it."""
        if not self.owns(module_name):
            raise ValueError(f"{module_name!r} is not a module of {self.name}")
        try:
            return importlib.import_module(module_name)
        except ImportError:
            return None

    def source_dir(self) -> Optional[str]:
        """The directory of the (imported) framework's sources; None if not imported."""
        path = getattr(sys.modules.get(self.name), "__file__", None)
        return os.path.join(os.path.dirname(os.path.abspath(path)), "") if path else None

    # -- types ---------------------------------------------------------------------------

    def tensor_type(self) -> type:
        return self.module.Tensor

    def is_tensor(self, value: Any) -> bool:
        """True for a tensor of this framework (asked without importing the framework)."""
        if not self.loaded():
            return False
        try:
            tensor_class = self.tensor_type()
        except AttributeError:  # the framework is still being imported
            return False
        return isinstance(value, tensor_class)

    def tensor_meta(self, tensor: Any) -> Any:
        """The ``TensorMeta`` of a real tensor (shared, interned: ``frameworks.tensor_meta``)."""
        from . import tensor_meta
        return tensor_meta(tensor)

    def module_type(self) -> type:
        """The framework's ``nn.Module`` class."""
        return self.module.nn.Module

    def scalar_types(self) -> Tuple[type, ...]:
        """Argument classes that are no tensors (dtype, device): dispatch treats them as scalars."""
        return ()

    def dtype(self, name: str) -> Any:
        """The framework's dtype object called ``name`` (``"float32"``)."""
        return getattr(self.module, name)

    def default_float(self) -> Optional[str]:
        """The default floating dtype's name (``torch.set_default_dtype`` moves it)."""
        getter = getattr(self.module, "get_default_dtype", None)
        return None if getter is None else str(getter()).rsplit(".", 1)[-1]

    def method(self, name: str) -> Optional[Any]:
        """The tensor class's method ``name`` (None if the framework has none)."""
        return getattr(self.tensor_type(), name, None)

    def callable_named(self, module_name: str, name: str) -> Optional[Any]:
        """``module_name.name`` when that module is already imported (nothing is imported)."""
        return getattr(self.loaded_module(module_name), name, None)

    def functional(self) -> ModuleType:
        """The framework's ``nn.functional`` module."""
        return importlib.import_module(f"{self.name}.nn.functional")

    # -- tensors -------------------------------------------------------------------------

    @abstractmethod
    def empty(self, shape: Sequence[int], dtype: str, device: Any = None) -> Any:
        """An uninitialised tensor (``device`` None: the CPU)."""

    @abstractmethod
    def zeros(self, shape: Sequence[int], dtype: str, device: Any = None,
              stride: Optional[Sequence[int]] = None) -> Any:
        """A zero tensor; with ``stride`` laid out with those strides where the framework can."""

    def full(self, shape: Sequence[int], value: Any, dtype: str, device: Any = None) -> Any:
        return self.module.full(tuple(shape), value, dtype=self.dtype(dtype),
                                **self._device_kw(device))

    def _device_kw(self, device: Any) -> dict:
        return {} if device is None else {"device": device}

    def randn(self, shape: Sequence[int], dtype: str, device: Any = None, generator: Any = None) -> Any:
        """Standard-normal samples; from ``generator`` (see ``generator()``) when given."""
        extra = {} if generator is None else {"generator": generator}
        return self.module.randn(*shape, dtype=self.dtype(dtype), **self._device_kw(device), **extra)

    def from_numpy(self, array: Any) -> Any:
        return self.module.from_numpy(array)

    def to_numpy(self, tensor: Any) -> Any:
        """A numpy array of a (CPU) tensor's data; shares memory where the framework can."""
        return tensor.detach().numpy()

    def from_dlpack(self, value: Any) -> Any:
        """A zero-copy tensor of this framework over ``value`` (any DLPack producer)."""
        return self.module.from_dlpack(value)

    def clone(self, tensor: Any) -> Any:
        """A private copy of an example input (in-place ops during capture must not touch it)."""
        return tensor.detach().clone()

    def has_symbolic_sizes(self, tensor: Any) -> bool:
        """True when a tensor's sizes are symbolic (only frameworks with dynamic shapes)."""
        return False

    # -- grad, autocast, randomness ------------------------------------------------------

    def grad_mode_query(self) -> Callable[[], bool]:
        """The framework's own ``is_grad_enabled`` (kept by callers on their fast paths)."""
        return self.module.is_grad_enabled

    def is_grad_enabled(self) -> bool:
        return bool(self.grad_mode_query()())

    def set_grad_enabled(self, mode: bool) -> ContextManager[Any]:
        return self.module.set_grad_enabled(mode)

    def no_grad(self) -> ContextManager[Any]:
        return self.module.no_grad()

    def autograd_function(self) -> type:
        """The framework's ``autograd.Function`` base class."""
        return self.module.autograd.Function

    def check_recorded(self, outputs: Sequence[Any], what: str) -> None:
        """Raise when ``outputs`` of an ``autograd.Function.apply`` (grad mode on, an input
        requiring grad) came back recording nothing; the framework is trusted by default."""

    def autocast_enabled(self, device_type: str) -> bool:
        try:
            return bool(self.module.is_autocast_enabled(device_type))
        except Exception:  # noqa: BLE001 - a device without autocast support
            return False

    def autocast_disabled(self, device_type: str) -> ContextManager[Any]:
        return self.module.autocast(device_type, enabled=False)

    @abstractmethod
    def fork_rng(self) -> ContextManager[Any]:
        """Restore the framework's random state on exit."""

    def generator(self, device: Any, seed: int) -> Any:
        """A private random generator seeded with ``seed`` (the global stream is left alone)."""
        generator = self.module.Generator(**self._device_kw(device))
        generator.manual_seed(seed)
        return generator

    # -- custom ops, profiler, native dispatcher -----------------------------------------

    def device_probe(self, slow: Any) -> Callable[[Any], Any]:
        """A fast ``tensor -> device key`` for the custom-op hot path; ``slow`` while profiling."""
        def probe(tensor: Any) -> Any:
            return slow if self.profiler_active() else tensor.device.type
        return probe

    def fast_dispatch_ok(self, tensor_class: type) -> bool:
        """False for tensor subclasses that must take the general call path (fake tensors)."""
        return True

    def foreign_custom_op_types(self) -> Tuple[type, ...]:
        """Classes of the framework's own registered custom ops (opaque graph nodes)."""
        return ()

    def foreign_capture(self, op: Any, args: tuple, kwargs: dict) -> Any:
        """A proxy when the framework's own tracer records this call, else None."""
        return None

    def holds_foreign_proxy(self, values: Any) -> bool:
        """True when ``values`` hold a proxy of the framework's own tracer."""
        return False

    def keep_opaque(self, op: Any) -> bool:
        """Keep a custom op opaque to the framework's own graph capture; False if none is loaded."""
        return False

    def profiler_active(self) -> bool:
        return False

    def profiler_span(self, name: str) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def native_bridge(self) -> Any:
        """The framework's native custom-op dispatcher bridge, or None."""
        return None

    def tensor_guards(self) -> Any:
        """A native checker of many tensors' dtype / shape / strides / device / grad at once
        (Dynamo's ``TensorGuards``), or None."""
        return None

    #: Ops that return a tensor without ``dim`` and a named (values, indices) tuple with it.
    DIM_NAMED_RESULTS = frozenset({"max", "min", "median", "nanmedian"})

    def result_fields(self, name: str, args: tuple, kwargs: dict) -> Tuple[str, ...]:
        """Field names of the named tuple a call of op ``name`` with these graph arguments
        returns (``x.max(0)``: values, indices), () for any other result: how capture reads
        ``.indices`` on a result that has no example value to ask."""
        kind = self.named_result_type(name)
        if kind is None:
            return ()
        if name in self.DIM_NAMED_RESULTS and "dim" not in kwargs and not (
                len(args) > 1 and type(args[1]) is int):
            return ()  # x.max() / max(x, other): a tensor
        return tuple(getattr(kind, "_fields", None) or getattr(kind, "__match_args__", ()))

    def named_result_type(self, name: str) -> Optional[type]:
        """The named-tuple class op ``name`` returns (for some arguments), or None."""
        return None

    def owns_op(self, name: str) -> bool:
        """True when the framework's own op library defines ``name``."""
        return False

    # -- compiler and devices ------------------------------------------------------------

    @abstractmethod
    def compile(self, fn: Any, backend: Callable[..., Any], options: dict,
                dynamic: Optional[bool]) -> Any:
        """``fn`` compiled by the framework's own compiler with ``backend``."""

    def cuda_available(self) -> bool:
        return False
