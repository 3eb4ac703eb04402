"""``CustomOpDef``: one registered operator, callable on TensorPlay and torch tensors.

Call paths:

- hot (no tracer proxy, no keyword arguments, no autograd/autocast
  registration, no profiler recording): one device-key scan over the
  positional arguments, one dict hit in the resolved kernel table, one call;
- general: capture (ours or TensorPlay's tracer) -> autocast -> kernel
  resolution -> profiler span -> the framework's ``autograd.Function`` when
  gradients are wanted -> kernel.

What compiler passes read (documented, stable): ``name``, ``mutates_args``,
``is_triton_op``, ``is_tile_lang_op``, ``has_fake`` / ``fake(...)`` (output
metadata), ``kernels`` / ``kernel_for(device_type)`` (registered kernels),
``has_autograd``, ``schema``.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Optional, Sequence

from . import autograd as _autograd
from . import dispatch as _dispatch
from . import native as _native
from .profiling import profiler_active, span
from .registry import LOCK
from .registration_args import dtype_name as _dtype_name, kernel_keys as _kernel_keys
from .schema import (
    fake_returned_none,
    normalize_device_types,
    require_str,
    returns_none,
    validate_mutates_args,
    validate_name,
    validate_schema,
)

_probe_get = _dispatch.PROBES.get
_framework_of_class = _dispatch.FRAMEWORK_OF.get


class CustomOpDef:
    """A registered custom operator (create with ``custom_op``, ``triton_op``, ...).

    >>> @custom_op("demo::twice", mutates_args=())
    ... def twice(x):
    ...     return x * 2
    >>> twice(tensorplay.ones(3))                      # doctest: +SKIP
    """

    def __init__(
        self,
        name: str,
        *,
        mutates_args: Sequence[str] = (),
        device_types: Any = None,
        schema: Optional[str] = None,
        is_triton_op: bool = False,
        is_tile_lang_op: bool = False,
    ) -> None:
        self._namespace, self._opname = validate_name(name)
        self._name = f"{self._namespace}::{self._opname}"
        self._mutates_args = frozenset(validate_mutates_args(mutates_args))
        self._device_keys = normalize_device_types(device_types)
        self._schema = validate_schema(schema, self._name)
        self._is_triton_op = bool(is_triton_op)
        self._is_tile_lang_op = bool(is_tile_lang_op)
        self._kernels: dict[Optional[str], Callable[..., Any]] = {}
        self._disabled: set = set()
        # Resolved key -> kernel (fallbacks and disabled kernels applied);
        # replaced wholesale on every change so readers never lock.
        self._table: dict = {}
        self._body: Optional[Callable[..., Any]] = None
        self._fake_fn: Optional[Callable[..., Any]] = None
        self._backward: Optional[Callable[..., Any]] = None
        self._setup_context: Optional[Callable[..., Any]] = None
        self._vmap_fn: Optional[Callable[..., Any]] = None
        self._autocast_rules: dict[str, str] = {}
        self._autograd_fns: dict[str, type] = {}
        self._plain = True  # no autograd / autocast registration: the hot path applies

    def _install_default_kernel(self, fn: Callable[..., Any]) -> None:
        """Use the decorated body as the kernel of the advertised devices (all when omitted)."""
        if not callable(fn):
            raise TypeError(f"{self._name}: operator body must be callable, got {type(fn)!r}")
        self._body = fn
        self.register_kernel(self._device_keys, fn)

    # -- introspection -----------------------------------------------------

    name = property(lambda self: self._name, doc="Qualified name ``ns::name``.")
    namespace = property(lambda self: self._namespace, doc="The ``ns`` of ``ns::name``.")
    opname = property(lambda self: self._opname, doc="The ``name`` of ``ns::name``.")
    mutates_args = property(lambda self: self._mutates_args, doc="Names of mutated arguments.")
    schema = property(lambda self: self._schema, doc="The schema string, if any.")
    is_triton_op = property(lambda self: self._is_triton_op)
    is_tile_lang_op = property(lambda self: self._is_tile_lang_op)
    has_fake = property(lambda self: self._fake_fn is not None, doc="A fake kernel exists.")
    has_autograd = property(lambda self: self._backward is not None)
    vmap_fn = property(lambda self: self._vmap_fn, doc="The ``register_vmap`` rule or None.")
    autocast_rules = property(lambda self: dict(self._autocast_rules))

    @property
    def kernels(self) -> dict:
        """``{device_key: kernel}`` as registered; ``None`` is the device-agnostic slot."""
        return dict(self._kernels)

    @property
    def signature_fn(self) -> Optional[Callable[..., Any]]:
        """The decorated body, else any kernel: its signature names the arguments."""
        return self._body or next(iter(self._kernels.values()), None)

    def kernel_for(self, device_type: Optional[str]) -> Callable[..., Any]:
        """The kernel a call on ``device_type`` runs (NotImplementedError if none)."""
        return self._resolve(device_type.lower() if isinstance(device_type, str) else None)

    def fake(self, *args: Any, **kwargs: Any) -> Any:
        """Run the fake kernel: outputs with the real outputs' metadata."""
        if self._fake_fn is None:
            raise NotImplementedError(
                f"{self._name} has no fake kernel; register one with "
                f"{self._name}.register_fake(fn) so its output metadata can be inferred"
            )
        return self._fake_fn(*args, **kwargs)

    @property
    def __name__(self) -> str:  # graph target formatters read target.__name__
        return self._name

    def __repr__(self) -> str:
        kind = "triton_op" if self._is_triton_op else (
            "tile_lang_op" if self._is_tile_lang_op else "custom_op")
        return f"<{kind} {self._name}>"

    def __reduce__(self) -> Any:  # ops are singletons: pickles refer to the registry
        from .registry import get_op

        return (get_op, (self._name,))

    def __copy__(self) -> "CustomOpDef":
        return self

    def __deepcopy__(self, memo: dict) -> "CustomOpDef":
        return self

    # -- registration ------------------------------------------------------

    def _changed(self) -> None:
        self._table = {}
        self._plain = self._backward is None and not self._autocast_rules

    def register_kernel(self, device_types: Any = None, fn: Optional[Callable] = None, /) -> Any:
        """Register the kernel of one or more device types (replaces: hot swap).

        ``None`` or a ``Composite...`` spelling is the device-agnostic slot.
        Direct (``op.register_kernel("cpu", fn)``) or as a decorator.
        """
        keys = _kernel_keys(device_types)

        def decorator(f: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(f):
                raise TypeError(f"{self._name}: kernel must be callable, got {type(f)!r}")
            with LOCK:
                for key in [None] if keys is None else keys:
                    self._kernels[key] = f
                self._changed()
            for key in [None] if keys is None else keys:
                _native.mirror(self._name, None if key is None else [key], f)
            return f

        return decorator(fn) if fn is not None else decorator

    def register_fake(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register the fake (meta) kernel: same arguments, outputs with the right metadata."""
        if not callable(fn):
            raise TypeError(f"{self._name}: fake kernel must be callable, got {type(fn)!r}")
        self._fake_fn = fn
        return fn

    def register_autograd(
        self, backward: Callable[..., Any], /, *, setup_context: Optional[Callable] = None
    ) -> None:
        """Register ``backward(ctx, *grad_outputs)`` (and ``setup_context(ctx, inputs, output)``).

        Calls that need gradients run through the framework's own
        ``autograd.Function``; under ``no_grad`` the kernel runs directly.
        """
        if not callable(backward):
            raise TypeError(f"{self._name}: backward must be callable, got {type(backward)!r}")
        if setup_context is not None and not callable(setup_context):
            raise TypeError(
                f"{self._name}: setup_context must be callable or None, got {setup_context!r}"
            )
        with LOCK:
            self._backward, self._setup_context = backward, setup_context
            self._autograd_fns = {}
            self._changed()

    def register_vmap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Store a vmap rule ``fn(info, in_dims, *args)`` (exposed on the autograd Function)."""
        if not callable(fn):
            raise TypeError(f"{self._name}: vmap function must be callable, got {type(fn)!r}")
        with LOCK:
            self._vmap_fn = fn
            self._autograd_fns = {}
        return fn

    def register_autocast(self, device_type: str, cast_inputs: Any) -> None:
        """Cast floating tensor inputs to ``cast_inputs`` while autocast is on for ``device_type``."""
        key = require_str(device_type, "device_type").lower()
        name = _dtype_name(cast_inputs)
        with LOCK:
            self._autocast_rules[key] = name
            self._changed()

    @contextlib.contextmanager
    def set_kernel_enabled(self, device_type: str, enabled: bool = True):
        """Context manager enabling/disabling the ``device_type`` kernel; restores on exit.

        A disabled concrete kernel falls back to the device-agnostic one.
        Disabling twice (or enabling an enabled kernel) warns and changes nothing.
        """
        key = device_type.lower() if isinstance(device_type, str) else device_type
        action = "enable" if enabled else "disable"
        with LOCK:
            originally_disabled = key in self._disabled
            if key not in self._kernels and None not in self._kernels:
                warnings.warn(
                    f"Attempted to {action} kernel for {key!r} but no kernel was "
                    f"registered for this device type ({self._name}).", stacklevel=3)
            if enabled == (not originally_disabled):
                state = "enabled" if enabled else "disabled"
                warnings.warn(
                    f"Attempted to {action} kernel for {key!r} but it was already "
                    f"{state} ({self._name}).", stacklevel=3)
            elif enabled:
                self._disabled.discard(key)
            else:
                self._disabled.add(key)
            self._changed()
        try:
            yield
        finally:
            with LOCK:
                if originally_disabled:
                    self._disabled.add(key)
                else:
                    self._disabled.discard(key)
                self._changed()

    # -- dispatch ----------------------------------------------------------

    def _resolve(self, key: Any) -> Callable[..., Any]:
        table = self._table
        kernel = table.get(key)
        if kernel is not None:
            return kernel
        kernels = self._kernels
        if key is not None and key not in self._disabled:
            kernel = kernels.get(key)
        if kernel is None:
            kernel = kernels.get(None)
        if kernel is None:
            registered = sorted(str(k) for k in list(kernels))
            where = f" for device {key!r}" if key is not None else ""
            hint = f"; registered devices: {registered}" if registered else ""
            raise NotImplementedError(
                f"{self._name} has no kernel{where}{hint}. Register one via "
                f"{self._name}.register_kernel(...)"
            )
        table[key] = kernel
        return kernel

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = None
        for arg in args:
            probe = _probe_get(arg.__class__)
            if probe is None:  # a proxy, a container or a class not learned yet
                return self._call_general(args, kwargs)
            if key is None:
                key = probe(arg)
        if kwargs:
            return self._call_general(args, kwargs)
        kernel = self._table.get(key)
        if kernel is None:  # unresolved key, or a profiler is recording
            return self._call_general(args, kwargs)
        if self._plain:
            return kernel(*args)
        return self._call_registered(args, kernel)

    def _call_registered(self, args: tuple, kernel: Callable[..., Any]) -> Any:
        """Hot path of an op with an autograd formula: flat positional tensors only."""
        if self._autocast_rules:
            return self._call_general(args, {})
        framework = None
        needs_grad = False
        for arg in args:
            fw = _framework_of_class(arg.__class__)
            if fw is not None:
                framework = framework or fw
                needs_grad = needs_grad or arg.requires_grad
        if needs_grad and _dispatch.GRAD_ENABLED[framework]():
            return _autograd.apply(self, framework, kernel, args, {})
        return kernel(*args)

    def _call_general(self, args: tuple, kwargs: dict) -> Any:
        proxy = _dispatch.capture_if_tracing(self, args, kwargs, self._example_fn)
        if proxy is not None:
            return proxy
        return self.eager(*args, **kwargs)

    def eager(self, *args: Any, **kwargs: Any) -> Any:
        """Dispatch real tensors with full eager semantics, never capturing."""
        for arg in args:
            if arg.__class__ not in _dispatch.PROBES:
                _dispatch.learn_class(arg)
        tensor = _dispatch.first_tensor(args)
        if tensor is None and kwargs:
            tensor = _dispatch.first_tensor(kwargs.values())
        framework = _dispatch.framework_of(tensor)
        key = _dispatch.device_key(tensor)
        rules = self._autocast_rules
        if rules and key in rules and _dispatch.autocast_enabled(framework, key):
            dtype = rules[key]
            args = tuple(_dispatch.cast_floating(v, framework, dtype) for v in args)
            kwargs = {k: _dispatch.cast_floating(v, framework, dtype) for k, v in kwargs.items()}
            with _dispatch.autocast_disabled(framework, key):
                return self._run(framework, key, args, kwargs)
        return self._run(framework, key, args, kwargs)

    def _run(self, framework: Optional[str], key: Any, args: tuple, kwargs: dict) -> Any:
        kernel = self._resolve(key)
        if (self._backward is not None and self._fake_fn is not None
                and type(_dispatch.first_tensor(args)).__name__ == "FakeTensor"):
            # Dynamo computing example values: an op with its own backward is opaque to
            # torch.compile (tensorplay_graph.training), so its kernel need not be traceable.
            kernel = self._fake_fn
        wants_grad = (
            self._backward is not None
            and framework is not None
            and _dispatch.grad_enabled(framework)
            and _dispatch.any_requires_grad(args, kwargs)
        )
        if framework is not None and profiler_active(framework):
            with span(framework, self._name):
                if wants_grad:
                    return _autograd.apply(self, framework, kernel, args, kwargs)
                return kernel(*args, **kwargs)
        if wants_grad:
            return _autograd.apply(self, framework, kernel, args, kwargs)
        return kernel(*args, **kwargs)

    @property
    def _example_fn(self) -> Optional[Callable[..., Any]]:
        """What capture runs on example values: the fake kernel, or nothing.

        The op's body never runs during capture (it may launch kernels, count calls
        or write into undeclared inputs): without a fake the node's metadata stays
        unknown until the compiled program's first call runs it for real, once.
        """
        fake = self._fake_fn
        if fake is None:
            return None

        def checked_fake(*args: Any, **kwargs: Any) -> Any:
            out = fake(*args, **kwargs)
            if out is None and not returns_none(self.signature_fn, self._mutates_args):
                raise TypeError(fake_returned_none(self._name, fake))
            return out

        return checked_fake

    def run_native(self, inputs: Sequence[Any], *, device_type: Optional[str] = None) -> list:
        """Call this op through TensorPlay's native dispatcher (tensor-only signatures).

        RuntimeError says so when the TensorPlay build has no native bridge.
        """
        return _native.run_native(self._name, self._kernels, inputs, device_type)
