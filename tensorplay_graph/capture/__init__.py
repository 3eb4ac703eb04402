"""Capture: turn a TensorPlay or torch program into a GraphModule.

``capture(fn_or_module, *example_inputs)`` and ``Tracer().trace(fn,
sample_inputs=...)`` record the program; ``capturing()``, ``capture_call()``
and ``iter_proxies()`` let registered custom ops record themselves as one node.
"""

from ..errors import GraphCaptureError
from .context import capture_call, capturing, iter_proxies
from .proxy import DataDependentError, GraphBreakError, Proxy, UntraceableCallError
from .api import Captured, capture, capture_program
from .tracer import NO_EXAMPLE, Tracer

__all__ = ["Captured", "DataDependentError", "GraphBreakError", "GraphCaptureError", "NO_EXAMPLE",
           "Proxy", "Tracer", "UntraceableCallError", "capture", "capture_call", "capture_program",
           "capturing", "iter_proxies"]


def __dir__() -> list:
    return list(__all__)
