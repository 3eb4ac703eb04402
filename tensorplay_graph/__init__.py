"""tensorplay_graph: compile TensorPlay programs around their custom operators.

>>> import tensorplay as tp, tensorplay_graph as tpg
>>> gm = tpg.capture(lambda x: (x * 2).relu(), tp.randn(4, 8))
>>> print(gm.code)                                  # doctest: +SKIP

Public names are resolved lazily so that importing the package needs only
numpy, networkx and graphviz.
"""

from __future__ import annotations

import importlib
import os as _os
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # IR
    "Node": "tensorplay_graph.ir.node",
    "Graph": "tensorplay_graph.ir.graph",
    "GraphModule": "tensorplay_graph.ir.graph_module",
    "TensorMeta": "tensorplay_graph.ir.meta",
    "map_arg": "tensorplay_graph.ir.node",
    # errors
    "TensorPlayGraphError": "tensorplay_graph.errors",
    "GraphCaptureError": "tensorplay_graph.errors",
    "GraphLintError": "tensorplay_graph.errors",
    "ShapeError": "tensorplay_graph.errors",
    "UnsupportedOpError": "tensorplay_graph.errors",
    "LoweringError": "tensorplay_graph.errors",
    "MissingLoweringError": "tensorplay_graph.errors",
    "UnknownBackendError": "tensorplay_graph.errors",
    "UnknownOptionError": "tensorplay_graph.errors",
    # capture
    "capture": "tensorplay_graph.capture",
    "Tracer": "tensorplay_graph.capture",
    "Proxy": "tensorplay_graph.capture",
    "capturing": "tensorplay_graph.capture",
    "capture_call": "tensorplay_graph.capture",
    # execution and drawing
    "Interpreter": "tensorplay_graph.interpreter",
    "render": "tensorplay_graph.drawing",
    # compiler
    "explain": "tensorplay_graph.explanation",
    "Explanation": "tensorplay_graph.explanation",
    "compile": "tensorplay_graph.compiler",
}

_SUBMODULES = ("library", "ops", "prims", "passes", "backends", "ir", "frameworks", "logs")


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        module = importlib.import_module(f"tensorplay_graph.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'tensorplay_graph' has no attribute {name!r}")


__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])


def __dir__() -> list:
    return list(__all__)

# ``capture`` is both a function and the subpackage that defines it. Importing the
# subpackage binds it as a package attribute, which would shadow the function, so the
# function is bound eagerly here, after the subpackage is loaded (it imports no
# framework). Reach the subpackage's modules with ``from tensorplay_graph.capture import ...``.
from .capture import capture  # noqa: E402,F401

if _os.environ.get("TPG_LOGS"):
    from .logs import configure_from_env

    configure_from_env()
