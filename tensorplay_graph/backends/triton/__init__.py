"""The Triton backend: generated fused kernels, a kernel cache, a lean launcher.

Imported lazily by the backend registry (``get_backend("triton")``); this
package itself imports no framework until a kernel is compiled or run.
"""

from __future__ import annotations

from .backend import TritonBackend, compile_triton_op
from ..cuda_graphs import CudaGraphRunner

__all__ = ["TritonBackend", "CudaGraphRunner", "compile_triton_op", "BACKEND"]

BACKEND = TritonBackend()


def __dir__() -> list:
    return list(__all__)
