"""The torch adapter (torch is imported on first use, never by importing this module).

The trace hooks (``__torch_function__`` resolution, the random-call function mode,
``is_compiling()``) are in ``capture/hooks/torch.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import functools
import importlib.util
import logging
from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence, Tuple

from .base import FrameworkAdapter

__all__ = ["TorchAdapter", "ADAPTER"]

logger = logging.getLogger("tensorplay_graph.frameworks.torch")


class TorchAdapter(FrameworkAdapter):
    name = "torch"

    def defines(self, target: Any) -> bool:
        # Any torch* module: torch's own submodules and the _C bindings alike.
        return (getattr(target, "__module__", None) or "").startswith("torch")

    def scalar_types(self) -> Tuple[type, ...]:
        return (self.module.dtype, self.module.device)

    def named_result_type(self, name: str) -> Optional[type]:
        kind = getattr(self.module.return_types, name, None)  # torch.return_types.cummin
        return kind if isinstance(kind, type) and issubclass(kind, tuple) else None

    # -- tensors -------------------------------------------------------------------------

    def empty(self, shape: Sequence[int], dtype: str, device: Any = None) -> Any:
        torch = self.module
        return torch.empty(tuple(shape), dtype=getattr(torch, dtype), **self._device_kw(device))

    def zeros(self, shape: Sequence[int], dtype: str, device: Any = None,
              stride: Optional[Sequence[int]] = None) -> Any:
        torch = self.module
        shape = tuple(shape)
        if stride is not None:
            return torch.empty_strided(shape, tuple(stride), dtype=getattr(torch, dtype),
                                       **self._device_kw(device)).zero_()
        return torch.zeros(shape, dtype=getattr(torch, dtype), **self._device_kw(device))

    def has_symbolic_sizes(self, tensor: Any) -> bool:
        """True when a (fake) tensor's sizes or strides hold SymInts (Dynamo dynamic shapes).

        Checked by type only: converting a SymInt to int would add a Dynamo guard.
        """
        try:
            dims = tuple(tensor.shape) + tuple(tensor.stride())
        except RuntimeError:  # no strides (sparse, nested): sizes decide
            dims = tuple(tensor.shape)
        sym_int = self.module.SymInt
        return any(isinstance(d, sym_int) for d in dims)

    # -- randomness ----------------------------------------------------------------------

    @contextlib.contextmanager
    def fork_rng(self) -> Iterator[None]:
        """Restore torch's CPU (and initialised CUDA) random state on exit."""
        torch = self.module
        cuda = torch.cuda.is_initialized()
        devices = list(range(torch.cuda.device_count())) if cuda else []
        with torch.random.fork_rng(devices=devices):
            yield

    # -- custom ops and the profiler -----------------------------------------------------

    def device_probe(self, slow: Any) -> Callable[[Any], Any]:
        profiler = importlib.import_module("torch.autograd.profiler")

        def probe(tensor: Any) -> Any:
            if profiler._is_profiler_enabled:
                return slow
            return "cpu" if tensor.is_cpu else tensor.device.type

        return probe

    def fast_dispatch_ok(self, tensor_class: type) -> bool:
        # FakeTensor and other modes dispatch through __torch_dispatch__: keep them slow.
        return tensor_class.__torch_dispatch__ is self.module.Tensor.__torch_dispatch__

    def keep_opaque(self, op: Any) -> bool:
        """``allow_in_graph`` for Dynamo, which would otherwise trace the op's body."""
        dynamo = self.loaded_module("torch._dynamo")
        if dynamo is None:
            return False
        dynamo.allow_in_graph(op)
        return True

    def profiler_active(self) -> bool:
        profiler = self.loaded_module("torch.autograd.profiler")
        return bool(getattr(profiler, "_is_profiler_enabled", False))

    def profiler_span(self, name: str) -> ContextManager[Any]:
        return importlib.import_module("torch.autograd.profiler").record_function(name)

    # -- compiler and devices ------------------------------------------------------------

    def compile(self, fn: Any, backend: Callable[..., Any], options: dict,
                dynamic: Optional[bool]) -> Any:
        compiled = self.module.compile(fn, backend=backend, options=options, dynamic=dynamic)
        runtime_error = self.module._dynamo.exc.TorchRuntimeError

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            # Dynamo runs each op on fake tensors first; some of torch's meta/ref kernels reject
            # inputs its eager kernels accept (log_softmax of an empty bool tensor: the ref
            # subtracts bools, the eager kernel returns early). Eager is the reference: run the
            # call eagerly -- it gives eager's result, or raises eager's own error.
            versions = self._versions(fn, args, kwargs)
            try:
                return compiled(*args, **kwargs)
            except runtime_error as exc:
                if self._versions(fn, args, kwargs) != versions:
                    # graphs Dynamo ran before the failing op wrote to an input: starting the
                    # call over eagerly would apply those writes twice
                    raise RuntimeError(
                        f"{getattr(fn, '__name__', 'program')}: Dynamo could not run an op on "
                        f"fake tensors after the call had already written to its inputs, so it "
                        f"cannot be rerun eagerly ({exc}). Fix: call it without "
                        f"tensorplay_graph.compile, or avoid the data-dependent Python that "
                        f"hands it to Dynamo") from exc
                logger.warning("%s: Dynamo could not run an op on fake tensors (%s); running "
                               "this call eagerly", getattr(fn, "__name__", "program"),
                               " ".join(str(exc).split())[:300] or type(exc).__name__)
                return fn(*args, **kwargs)

        return call

    def _versions(self, fn: Any, args: tuple, kwargs: dict) -> list:
        """Version counters of the call's tensors (arguments, a module's state): they move on
        every in-place write."""
        leaves = self.module.utils._pytree.tree_leaves((args, kwargs))
        owner = getattr(fn, "__self__", fn)
        if isinstance(owner, self.module.nn.Module):
            leaves += list(owner.state_dict(keep_vars=True).values())
        return [t._version for t in leaves if isinstance(t, self.module.Tensor)]

    def cuda_available(self) -> bool:
        if not self.loaded() and importlib.util.find_spec("torch") is None:
            return False
        return bool(self.module.cuda.is_available())

    def device_name(self) -> str:
        """The current CUDA device's name (part of autotuning cache keys)."""
        return self.module.cuda.get_device_name()

    def timing_events(self) -> Tuple[Any, Any]:
        """A pair of CUDA events that record elapsed time."""
        event = self.module.cuda.Event
        return event(enable_timing=True), event(enable_timing=True)

    @contextlib.contextmanager
    def side_stream(self) -> Iterator[None]:
        """Run the body on a fresh CUDA stream ordered after, and before, the current one."""
        cuda = self.module.cuda
        stream = cuda.Stream()
        stream.wait_stream(cuda.current_stream())
        with cuda.stream(stream):
            yield
        cuda.current_stream().wait_stream(stream)

    def tensor_guards(self) -> Any:
        try:
            from torch._C._dynamo.guards import TensorGuards
        except (ImportError, AttributeError):
            return None
        return TensorGuards

    def cuda_graph(self) -> Tuple[Any, ContextManager[Any]]:
        """``(graph, context capturing into it)``: replay the work with ``graph.replay()``."""
        graph = self.module.cuda.CUDAGraph()
        return graph, self.module.cuda.graph(graph)


ADAPTER = TorchAdapter()
