"""The per-mode measurement loop the model benchmarks share (``models_gpu.py``, ``training_gpu.py``).

A script names its entry points (mode -> zero-argument factory of the callable to measure)
and a ``measure(fn, row)`` that fills one result row; :func:`run_modes` builds each chosen
mode after a Dynamo reset, turns an exception into an error row (a row, not the end of the
run) and prints every row as a JSON line. Timing is the median of CUDA-event timings
(:func:`median_ms`); on the CPU (``training_gpu.py --smoke``) one wall-clock call, which
claims nothing.

Import this module before torch: :func:`use_cache_root` must set the compilers' cache
variables first.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

#: the cache variables every compiler of a run reads, and their folder under the root
CACHE_VARS = (("TRITON_CACHE_DIR", "triton"), ("TPG_CACHE_DIR", "tpg"),
              ("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TILELANG_CACHE_DIR", "tilelang"))

Row = Dict[str, Any]


def use_cache_root(prefix: str, root: Optional[str] = None) -> str:
    """One cache root for every compiler (``root``, or a fresh temporary folder), unless a
    variable is already set; transformers stays offline. Call before importing torch."""
    root = root or tempfile.mkdtemp(prefix=prefix)
    for var, sub in CACHE_VARS:
        os.environ.setdefault(var, os.path.join(root, sub))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return root


def parser(models: Mapping[str, Any], modes: str, modes_help: Optional[str] = None
           ) -> argparse.ArgumentParser:
    """``--out``, ``--models`` (all of ``models`` by default) and ``--modes``."""
    found = argparse.ArgumentParser()
    found.add_argument("--out", default="out")
    found.add_argument("--models", default=",".join(models))
    found.add_argument("--modes", default=modes, help=modes_help)
    return found


def synchronize(device: str = "cuda") -> None:
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


def timed_call(call: Callable[[], Any], device: str = "cuda") -> Tuple[Any, float]:
    """``(call(), seconds)``, synchronized before and after: a first (compiling) call."""
    synchronize(device)
    start = time.perf_counter()
    out = call()
    synchronize(device)
    return out, round(time.perf_counter() - start, 2)


def median_ms(call: Callable[[], Any], reps: int, device: str = "cuda", warmup: int = 3) -> float:
    """Median ms of ``call()`` over ``reps`` CUDA-event timings after ``warmup`` calls; on the
    CPU the wall-clock ms of one call after the warm-up."""
    for _ in range(warmup):
        call()
    if device == "cpu":
        start = time.perf_counter()
        call()
        return (time.perf_counter() - start) * 1e3
    import torch
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def steady_ms(fn: Callable[..., Any], args: tuple, reps: int = 30, hold: bool = False) -> float:
    """Median ms of ``fn(*args)``; ``hold``: the previous call's result stays alive while
    the next runs (``out = f(x)`` in a loop), which makes CUDA-graph runners copy their
    outputs."""
    held: List[Any] = [None]

    def call() -> None:
        if hold:
            held[0] = fn(*args)
        else:
            fn(*args)

    ms = median_ms(call, reps)
    held.clear()
    return ms


def run_modes(name: str, entry_points: Mapping[str, Callable[[], Any]], modes: Set[str],
              measure: Callable[[Any, Row], None], results: List[Row], *,
              error_chars: int = 400, trace_lines: int = 5,
              after_row: Optional[Callable[[Row], None]] = None) -> None:
    """One row per chosen mode of model ``name``, appended to ``results`` and printed."""
    import torch
    for mode, make in entry_points.items():
        if mode not in modes:
            continue
        row: Row = {"model": name, "mode": mode}
        try:
            torch._dynamo.reset()
            measure(make(), row)
        except Exception as exc:  # a row, not the end of the run
            row["ok"] = False
            row["error"] = f"{type(exc).__name__}: {str(exc)[:error_chars]}"
            row["where"] = traceback.format_exc().splitlines()[-1 - trace_lines:-1]
        results.append(row)
        print(json.dumps(row), flush=True)
        if after_row is not None:
            after_row(row)


def ratios(results: List[Row], name: str, fields: Mapping[str, str]) -> Dict[str, Row]:
    """For each timed row of model ``name``: ``row[field] = base's ms / row's ms`` for each
    ``base mode -> field`` that ran; returns the timed rows by mode."""
    base = {r["mode"]: r for r in results if r["model"] == name and "ms" in r}
    for r in results:
        if r["model"] != name or "ms" not in r:
            continue
        for mode, field in fields.items():
            if mode in base:
                r[field] = round(base[mode]["ms"] / r["ms"], 3)
    return base


def run_meta(device: str = "cuda") -> Row:
    """The date, device and torch version a run's rows were measured with."""
    import torch
    return {"date": time.strftime("%Y-%m-%d"),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "torch": torch.__version__}


def write_rows(out_dir: str, file: str, meta: Row, rows: List[Row]) -> None:
    with open(os.path.join(out_dir, file), "w") as handle:
        json.dump({"meta": meta, "rows": rows}, handle, indent=1)
