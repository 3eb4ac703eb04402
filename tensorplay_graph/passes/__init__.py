"""Graph passes; the pipeline order lives in :mod:`tensorplay_graph.passes.pipeline`.

>>> from tensorplay_graph.passes import compile_graph, PassManager   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

# Pass functions share their module's name (``passes.lower`` is the module once
# imported), so import them from their modules: ``from ...passes.lower import lower``.
_EXPORTS = {
    "Barrier": "barriers", "partition_dag": "partition", "regions_from_meta": "partition",
    "dce": "cleanup", "cse": "cleanup", "PassManager": "manager", "compile_graph": "pipeline",
    "plan_graph": "pipeline", "build_passes": "pipeline", "PASS_NAMES": "pipeline",
}

__all__ = sorted(_EXPORTS)


def __dir__() -> list:
    return list(__all__)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
