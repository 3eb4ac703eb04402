"""``wrap_triton`` / ``wrap_tilelang``: raw kernel launches inside ``triton_op`` / ``tile_lang_op``.

Eager launches pass through.  A launch reached with tracer proxies raises
``GraphCaptureError``: raw launches are never graph nodes, the op around
them is.  TensorPlay tensors cross to torch zero-copy through DLPack
(Triton and TileLang launch only torch tensors); TileLang outputs cross back
when the inputs were TensorPlay tensors.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..errors import GraphCaptureError
from ..frameworks import adapter_for, framework_of
from .dispatch import contains_proxy


def _to_torch(value: Any, seen: list) -> Any:
    """``value`` with TensorPlay tensors replaced by zero-copy torch views."""
    if framework_of(value) == "tensorplay":
        seen.append(True)
        return adapter_for("torch").from_dlpack(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_torch(item, seen) for item in value)
    return value


def _to_tensorplay(value: Any) -> Any:
    if framework_of(value) == "torch":
        return adapter_for("tensorplay").from_dlpack(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to_tensorplay(item) for item in value)
    return value


def _convert_args(args: tuple, kwargs: dict) -> tuple[tuple, dict, bool]:
    if not adapter_for("tensorplay").loaded():  # no TensorPlay tensor can exist
        return args, kwargs, False
    seen: list = []
    args = tuple(_to_torch(a, seen) for a in args)
    kwargs = {k: _to_torch(v, seen) for k, v in kwargs.items()}
    return args, kwargs, bool(seen)


class TritonKernelWrapper:
    """Grid-indexable pass-through around a ``@triton.jit`` kernel: ``wrapped[grid](*args)``."""

    __slots__ = ("kernel",)

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        kernel = self.kernel
        name = getattr(kernel, "__name__", "triton_kernel")

        def launcher(*args: Any, **kwargs: Any) -> Any:
            if contains_proxy(grid, args, kwargs):
                raise GraphCaptureError(
                    f"a raw Triton launch of {name!r} cannot be captured; put the launch "
                    "inside a tensorplay_graph.library.triton_op and call that op instead"
                )
            args, kwargs, _ = _convert_args(args, kwargs)
            return kernel[grid](*args, **kwargs)

        launcher.__name__ = name
        return launcher

    def __repr__(self) -> str:
        return f"wrap_triton({getattr(self.kernel, '__name__', self.kernel)!r})"


def wrap_triton(kernel: Any) -> TritonKernelWrapper:
    """Mark a Triton kernel as launchable inside a ``triton_op``.

    Accepts a ``@triton.jit`` ``JITFunction`` or any grid-indexable launcher;
    idempotent on wrappers; TypeError otherwise.
    """
    if isinstance(kernel, TritonKernelWrapper):
        return kernel
    is_jit = False
    if "triton" in sys.modules:
        try:
            from triton.runtime.jit import JITFunction

            is_jit = isinstance(kernel, JITFunction)
        except ImportError:
            is_jit = False
    if not is_jit and not hasattr(kernel, "__getitem__"):
        raise TypeError(
            "wrap_triton expects a @triton.jit kernel (JITFunction) or a "
            f"grid-indexable launcher, got {type(kernel)!r}"
        )
    return TritonKernelWrapper(kernel)


class TileLangKernelWrapper:
    """Pass-through around a compiled TileLang kernel (called directly: no grid)."""

    __slots__ = ("kernel",)

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def compile(self, *args: Any, **kwargs: Any) -> "TileLangKernelWrapper":
        """Bind a lazy ``@tilelang.jit`` factory (shape/constexpr arguments) into a ready kernel."""
        return TileLangKernelWrapper(self.kernel(*args, **kwargs))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if contains_proxy(args, kwargs):
            raise GraphCaptureError(
                "a raw TileLang launch cannot be captured; put the launch inside a "
                "tensorplay_graph.library.tile_lang_op and call that op instead"
            )
        args, kwargs, from_tensorplay = _convert_args(args, kwargs)
        out = self.kernel(*args, **kwargs)
        return _to_tensorplay(out) if from_tensorplay else out

    def __repr__(self) -> str:
        return f"wrap_tilelang({self.kernel!r})"


def _looks_like_tilelang(kernel: Any) -> bool:
    """Duck typing: an opt-in ``_tilelang_kernel`` marker or a JITKernel's attributes."""
    marker = getattr(kernel, "_tilelang_kernel", None)
    if marker is not None:
        return bool(marker)
    return any(hasattr(kernel, attr) for attr in ("adapter", "torch_function", "get_tir"))


def _is_tilelang_object(kernel: Any) -> bool:
    if "tilelang" not in sys.modules:
        return False
    try:
        from tilelang.jit.kernel import JITKernel

        if isinstance(kernel, JITKernel):
            return True
    except ImportError:
        pass
    try:
        from tilelang.jit import JITImpl

        return isinstance(kernel, JITImpl)
    except ImportError:
        return False


def wrap_tilelang(kernel: Any) -> TileLangKernelWrapper:
    """Mark a TileLang kernel as launchable inside a ``tile_lang_op``.

    Accepts a compiled ``JITKernel``, the lazy ``JITImpl`` of ``@tilelang.jit``
    (bind it with ``.compile(...)``) or an object with ``_tilelang_kernel = True``;
    plain callables are rejected with TypeError so typos surface early.
    """
    if isinstance(kernel, TileLangKernelWrapper):
        return kernel
    if not callable(kernel):
        raise TypeError(f"wrap_tilelang expects a callable TileLang kernel, got {type(kernel)!r}")
    if not (_is_tilelang_object(kernel) or _looks_like_tilelang(kernel)):
        raise TypeError(
            "wrap_tilelang expects a tilelang JITKernel/JITImpl or a duck-typed adapter, "
            f"got the plain callable {type(kernel)!r}; set '_tilelang_kernel = True' on "
            "a custom launcher to opt in"
        )
    return TileLangKernelWrapper(kernel)
