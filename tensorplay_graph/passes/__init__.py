"""Graph passes; the pipeline order lives in :mod:`tensorplay_graph.passes.pipeline`.

>>> from tensorplay_graph.passes import compile_graph, PassManager   # doctest: +SKIP
"""

from __future__ import annotations

from ..lazy import lazy_exports

# Pass functions share their module's name (``passes.lower`` is the module once
# imported), so import them from their modules: ``from ...passes.lower import lower``.
_EXPORTS = {
    "Barrier": "barriers", "partition_dag": "partition", "regions_from_meta": "partition",
    "dce": "cleanup", "cse": "cleanup", "PassManager": "manager", "compile_graph": "pipeline",
    "plan_graph": "pipeline", "build_passes": "pipeline", "PASS_NAMES": "pipeline",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
