"""A small, cached, reproducible tile-size sweep for GEMM kernels (CUDA only).

Every candidate of ``gemm.CANDIDATES`` that divides the problem is built and
timed on the same seeded inputs (median of CUDA-event timings); the winner is
stored in ``<cache>/gemm_autotune.json`` under a key of the description, the
GPU name and the TileLang version, so later runs reuse it without timing.
"""

from __future__ import annotations

import json
import logging
from typing import Dict, List, Optional, Sequence, Tuple

from ...frameworks import adapter_for
from ...progress import tracked
from . import cache
from .gemm import GemmDesc, GemmKernel, TileConfig, candidates_for, heuristic_config

log = logging.getLogger(__name__)
_FILE = "gemm_autotune.json"
SWEEP_SIZE = 4  # the biggest-tile candidates; smaller ones never won on Hopper at these sizes


def _key(desc: GemmDesc) -> str:
    return cache.digest(repr(desc), adapter_for("torch").device_name(), cache.tilelang_version())


def _load() -> Dict[str, dict]:
    try:
        return json.loads((cache.cache_dir() / _FILE).read_text())
    except (OSError, ValueError):
        return {}


def cached_tilelang_ms(desc: GemmDesc) -> Optional[float]:
    """The swept winner's time for ``desc`` on this GPU, if a sweep stored one (no timing)."""
    entry = _load().get(_key(desc))
    return float(entry["ms"]) if isinstance(entry, dict) and "ms" in entry else None


def random_tensor(meta):
    """Seeded small random values of ``meta``'s shape, dtype, device and strides."""
    torch = adapter_for("torch")
    device = meta.device
    gen = torch.generator(device, 0)
    values = (torch.randn(tuple(meta.shape), "float32", device=device, generator=gen) * 0.1)
    values = values.to(torch.dtype(meta.dtype))
    stride = tuple(getattr(meta, "stride", ()) or ())
    if len(stride) != len(meta.shape) or values.stride() == stride:
        return values
    out = torch.module.empty_strided(tuple(meta.shape), stride, dtype=values.dtype, device=device)
    out.copy_(values)
    return out


def tilelang_inputs(desc: GemmDesc):
    """Seeded inputs ``(A, B, *epilogue inputs)`` of ``desc``'s shapes on the GPU."""
    torch = adapter_for("torch")
    gen = torch.generator("cuda", 0)
    dt = torch.dtype(desc.dtype)
    lead = (desc.batch,) if desc.batch else ()

    def rnd(*shape):
        return (torch.randn(shape, "float32", device="cuda", generator=gen) * 0.1).to(dt)

    a = rnd(*lead, desc.M, desc.K)
    b = rnd(*lead, *((desc.N, desc.K) if desc.trans_b else (desc.K, desc.N)))
    ep = [rnd(desc.N) if e.kind == "col" else rnd(*lead, desc.M, desc.N) for e in desc.ep_inputs]
    return a, b, ep


def time_kernel(kernel: GemmKernel, args, reps: int = 20) -> float:
    """Median milliseconds of ``kernel(*args)`` over ``reps`` CUDA-event timings."""
    for _ in range(3):
        kernel(*args)
    times = []
    for _ in range(reps):
        start, end = adapter_for("torch").timing_events()
        start.record()
        kernel(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def sweep(desc: GemmDesc, candidates: Optional[Sequence[TileConfig]] = None,
          reps: int = 20) -> List[Tuple[TileConfig, float]]:
    """(config, median ms) for each candidate that builds; failures are logged and skipped."""
    a, b, ep = tilelang_inputs(desc)
    results = []
    for cfg in tracked(candidates or candidates_for(desc)[:SWEEP_SIZE],
                       f"autotuning GEMM {desc.M}x{desc.N}x{desc.K} {desc.dtype}", unit="config"):
        try:
            kernel = GemmKernel(desc, cfg).build()
            results.append((cfg, time_kernel(kernel, (a, b, *ep), reps)))
        except Exception as exc:  # a config that does not fit (smem, registers) is skipped
            log.warning("tilelang autotune: %s failed: %s", cfg, exc)
    return results


def tuned_config(desc: GemmDesc, candidates: Optional[Sequence[TileConfig]] = None) -> Optional[TileConfig]:
    """The cached winner for ``desc``, sweeping once when there is none."""
    key = _key(desc)
    table = _load()
    if key in table:
        return TileConfig(**table[key]["config"])
    results = sweep(desc, candidates)
    if not results:
        return heuristic_config(desc)
    best, ms = min(results, key=lambda r: r[1])
    table[key] = {"config": best.__dict__, "ms": ms, "desc": f"{desc.M}x{desc.N}x{desc.K} {desc.dtype}",
                  "all": [[c.__dict__, t] for c, t in results]}
    cache.write_atomic(cache.cache_dir() / _FILE, json.dumps(table, indent=1, sort_keys=True))
    return best
