"""The TensorPlay adapter (TensorPlay is imported on first use, never by importing this module).

The trace hooks (capture-call redirection, operator and random-function patches) are in
``capture/hooks/tensorplay.py``. TensorPlay 1.0 is CPU only: ``device`` arguments are
not passed on.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Optional, Sequence, Tuple

from .base import FrameworkAdapter

__all__ = ["TensorPlayAdapter", "ADAPTER", "prime_function_apply"]


class TensorPlayAdapter(FrameworkAdapter):
    name = "tensorplay"

    def scalar_types(self) -> Tuple[type, ...]:
        return (self.module.DType,)

    def defines(self, target: Any) -> bool:
        # Native tensor methods report no module: their class (TensorBase) names them.
        qualname = getattr(target, "__qualname__", "") or ""
        return super().defines(target) or qualname.startswith("TensorBase.")

    def is_tracer_proxy_type(self, tensor_class: type) -> bool:
        """TensorPlay's own tracer proxies, which must never be probed as tensors."""
        return "Proxy" in tensor_class.__name__

    def named_result_type(self, name: str) -> Optional[type]:
        # TensorPlay 1.0 names only max / min (dim given); sort, topk, cummin ... are plain tuples.
        module = self.import_module("tensorplay._return_types")
        return getattr(module, f"{name}_return_type", None) if module is not None else None

    # -- tensors -------------------------------------------------------------------------

    def _device_kw(self, device: Any) -> dict:
        return {}  # CPU only

    def empty(self, shape: Sequence[int], dtype: str, device: Any = None) -> Any:
        tp = self.module
        return tp.empty(tuple(shape), dtype=getattr(tp, dtype))

    def zeros(self, shape: Sequence[int], dtype: str, device: Any = None,
              stride: Optional[Sequence[int]] = None) -> Any:
        # Strides are not reproduced: TensorPlay's kernels accept any layout.
        tp = self.module
        return tp.zeros(tuple(shape), dtype=getattr(tp, dtype))

    def to_numpy(self, tensor: Any) -> Any:
        # detach() copies in TensorPlay 1.0: only pay it for tensors that need it.
        return tensor.detach().numpy() if getattr(tensor, "requires_grad", False) else tensor.numpy()

    # -- randomness ----------------------------------------------------------------------

    def fork_rng(self) -> ContextManager[Any]:
        """Restore TensorPlay's random state on exit (TensorPlay 1.0 is CPU only)."""
        return self.module.random.fork_rng(devices=[])

    # -- custom ops, the foreign tracer, the profiler and the native dispatcher ----------

    def device_probe(self, slow: Any) -> Callable[[Any], Any]:
        library = self.import_module("tensorplay.library")

        def probe(tensor: Any) -> Any:
            # TensorPlay's profiler keeps this session counter (see seed library).
            if library._profiling_sessions:
                return slow
            # get_device() is ~3x cheaper than device.type; TensorPlay has only cpu/cuda.
            return "cpu" if tensor.get_device() < 0 else "cuda"

        return probe

    def foreign_custom_op_types(self) -> Tuple[type, ...]:
        op_class = getattr(self.loaded_module("tensorplay.library"), "CustomOpDef", None)
        return (op_class,) if op_class is not None else ()

    def foreign_capture(self, op: Any, args: tuple, kwargs: dict) -> Any:
        utils = self.loaded_module("tensorplay.graph._utils")
        if utils is not None and utils.capturing():
            proxy = utils.capture_call(op, args, kwargs)
            if proxy is not None and getattr(op, "mutates_args", None):
                # its writes are its effect: TensorPlay's dead-code pass must keep the node
                proxy.node.meta["side_effect"] = True
            return proxy
        return None

    def holds_foreign_proxy(self, values: Any) -> bool:
        utils = self.loaded_module("tensorplay.graph._utils")
        if utils is not None:
            for _ in utils._iter_proxies(values):
                return True
        return False

    def profiler_active(self) -> bool:
        is_active = getattr(getattr(self.loaded_module("tensorplay"), "_C", None),
                            "_profiler_is_active", None)
        if is_active is not None and is_active():
            return True
        return bool(getattr(self.loaded_module("tensorplay.library"), "_profiling_sessions", 0))

    def profiler_span(self, name: str) -> ContextManager[Any]:
        return _Span(self.module._C, name)

    def native_bridge(self) -> Any:
        """``tensorplay._C`` (``_register_python_op_kernel`` / ``_call_native_op``), or None."""
        return getattr(self.loaded_module("tensorplay"), "_C", None)

    def owns_op(self, name: str) -> bool:
        has_op = getattr(self.loaded_module("tensorplay.library"), "has_op", None)
        return bool(has_op is not None and has_op(name))

    # -- autograd ------------------------------------------------------------------------

    _primed = False

    def autograd_function(self) -> type:
        """TensorPlay's ``autograd.Function``, its C++ ``apply`` primed first (see below)."""
        if not self._primed:
            prime_function_apply(self.module)
            TensorPlayAdapter._primed = True
        return self.module.autograd.Function

    def check_recorded(self, outputs: Sequence[Any], what: str) -> None:
        """RuntimeError when all ``outputs`` come back not requiring grad: TensorPlay's
        ``Function.apply`` stopped recording in this process (F27), and a result without
        gradients would be wrong."""
        if any(getattr(o, "requires_grad", False) for o in outputs):
            return
        raise RuntimeError(
            f"{what}: TensorPlay's autograd.Function.apply recorded nothing (its outputs do "
            f"not require grad), so the gradients would be lost. TensorPlay 1.0.0 stops "
            f"recording for the whole process when the first autograd.Function it ever "
            f"applies is given a tensor subclass such as an nn.Parameter. Apply one "
            f"autograd.Function to a plain tensor at the start of the process, before any "
            f"other: tensorplay_graph.frameworks.tensorplay.prime_function_apply(tensorplay) "
            f"does.")

    # -- compiler ------------------------------------------------------------------------

    def compile(self, fn: Any, backend: Callable[..., Any], options: dict,
                dynamic: Optional[bool]) -> Any:
        return self.module.compile(fn, backend=backend, options=options)


class _Span:
    """One user span in TensorPlay's profiler."""

    def __init__(self, c_api: Any, name: str) -> None:
        self.c_api, self.name = c_api, name

    def __enter__(self) -> None:
        self.c_api._profiler_user_begin(self.name)

    def __exit__(self, *exc: Any) -> None:
        self.c_api._profiler_user_end()


ADAPTER = TensorPlayAdapter()


def prime_function_apply(tp: Any) -> None:
    """Apply one ``autograd.Function`` to a plain tensor that requires grad.

    TensorPlay 1.0.0's C++ ``Function.apply`` settles on the first tensor type it is given:
    when the first apply of a process takes a subclass (an ``nn.Parameter``: our compiled
    training passes a module's parameters), no later apply records anything, its outputs do
    not require grad and gradients are silently lost (tests/models/FINDINGS.md F27). A plain
    tensor first keeps every later apply right. A process where a subclass came first
    cannot be mended: :meth:`TensorPlayAdapter.check_recorded` reports it."""
    class _Prime(tp.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad

    with tp.enable_grad():
        _Prime.apply(tp.zeros(1).requires_grad_(True))
