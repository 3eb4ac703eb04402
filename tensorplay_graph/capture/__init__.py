"""Capture: turn a TensorPlay or torch program into a GraphModule.

``capture(fn_or_module, *example_inputs)`` and ``Tracer().trace(fn,
sample_inputs=...)`` record the program; ``capturing()``, ``capture_call()``
and ``iter_proxies()`` let registered custom ops record themselves as one node.

Python binds an imported subpackage as an attribute of its parent, so
``tensorplay_graph.capture`` may be this package rather than the function;
the package is therefore callable and ``tensorplay_graph.capture(fn, x)``
works either way.
"""

import sys
import types

from ..errors import GraphCaptureError
from .context import capture_call, capturing, iter_proxies
from .proxy import Proxy
from .tracer import NO_EXAMPLE, Tracer, capture

__all__ = ["GraphCaptureError", "NO_EXAMPLE", "Proxy", "Tracer", "capture", "capture_call",
           "capturing", "iter_proxies"]


class _CallablePackage(types.ModuleType):
    """This package, callable as :func:`capture`."""

    def __call__(self, fn_or_module, *example_inputs):
        return capture(fn_or_module, *example_inputs)


sys.modules[__name__].__class__ = _CallablePackage
