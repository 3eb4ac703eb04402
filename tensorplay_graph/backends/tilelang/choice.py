"""The TileLang backend's side of a GEMM choice (``..gemm_choice``): the two candidates of one
GEMM group, the keys that name it, and the builds a ``gemm="measure"`` lowering will need.

>>> choice, cublas, tilelang = choice_for(backend, group, desc, region_id=0)   # doctest: +SKIP
>>> choice.describe()                                                         # doctest: +SKIP
'GEMM 2048x5632x2048 bfloat16 linear +1 epilogue op(s): cublas (not measured: ...)'
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any, List, Tuple

from ...errors import LoweringError
from ...frameworks import adapter_for
from ..base import Region
from ..cublas_gemm import CublasGemm, external_inputs, unavailable
from ..gemm_choice import CUBLAS, TILELANG, Candidate, GemmChoice, choose, lookup
from . import cache
from . import plan as planner
from .autotune import cached_tilelang_ms, random_tensor, tilelang_inputs
from .gemm import GemmDesc, canonical, compile_threads

__all__ = ["bare_key", "choice_key", "choice_for", "prefetch"]

log = logging.getLogger(__name__)


def bare_key(mm: Any) -> tuple:
    """The matmul alone (op, sizes, operand dtypes and strides, versions): the first part of
    a choice's key, what planning asks :func:`..gemm_choice.tilelang_won` about."""
    dims, reason = planner.gemm_dims(mm)
    if reason:
        raise LoweringError(reason)
    rule, args = planner.gemm_rule(mm.meta["prim"]), mm.meta.get("prim_args") or {}
    operands = [planner.tensor_meta(args[k]) for k in (rule.lhs, rule.rhs)]
    return (mm.meta["prim"].name, dims, [(m.dtype, tuple(m.stride)) for m in operands],
            adapter_for("torch").module.__version__, _tilelang_version())


def _tilelang_version() -> str:
    """TileLang's version without importing it (seconds): a GEMM cuBLAS takes never needs it."""
    try:
        return importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return cache.tilelang_version()


def choice_key(group: planner.Group, desc: GemmDesc) -> Tuple[tuple, str]:
    """(key parts, label) naming one GEMM group: the matmul, its epilogue, the operand layout."""
    mm = group.nodes[0]
    strides = [tuple(planner.tensor_meta(v).stride) for v in external_inputs(group.nodes)]
    key = (bare_key(mm), repr(canonical(desc)), strides)
    label = (f"GEMM {'%dx' % desc.batch if desc.batch else ''}{desc.M}x{desc.N}x{desc.K} "
             f"{desc.dtype} {mm.meta['prim'].name} +{len(group.nodes) - 1} epilogue op(s)")
    return key, label


def choice_for(backend: Any, group: planner.Group, desc: GemmDesc,
               region_id: int) -> Tuple[GemmChoice, Candidate, Candidate]:
    """(GemmChoice, cuBLAS Candidate, TileLang Candidate) for one GEMM group under
    ``backend.gemm``; a candidate is built only when timed or chosen."""
    nodes = list(group.nodes)
    metas = [planner.tensor_meta(v) for v in external_inputs(nodes)]
    cublas = Candidate(CUBLAS, lambda: CublasGemm(nodes, region_id),
                       lambda: tuple(random_tensor(m) for m in metas),
                       unavailable(nodes) if backend.gemm != TILELANG else None)
    tilelang = Candidate(TILELANG, lambda: backend.tilelang_kernel(desc).build(),
                         lambda: tilelang_inputs(desc))
    key, label = choice_key(group, desc)
    choice = choose(key, label, backend.gemm, cublas, tilelang, backend.timer,
                    lambda: cached_tilelang_ms(desc))
    return choice, cublas, tilelang


def prefetch(backend: Any, regions: List[Region]) -> None:
    """Under ``gemm="measure"``, start compiling every TileLang GEMM of ``regions`` whose race
    is not stored yet, side by side (``gemm.compile_threads``), before ``lower`` compiles the
    regions one by one -- instead of one race's compile at a time."""
    if backend.gemm != "measure" or compile_threads() <= 1:
        return
    for region in regions:
        if any(getattr(n.target, "is_tile_lang_op", False) for n in region.nodes):
            continue
        try:
            names = planner.value_names(list(region.inputs) + list(region.nodes))
            for group in planner.plan(region):
                if group.kind == "gemm" and group.outputs:
                    desc, _ = backend.gemm_desc(group, names)
                    if lookup(choice_key(group, desc)[0], backend.timer) is None:
                        backend.tilelang_kernel(desc).build_async()
        except Exception as exc:  # compile() meets the same problem and reports it
            log.debug("tilelang prefetch: region %d skipped: %s", region.id, exc)
