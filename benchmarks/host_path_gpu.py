"""Where the host time before a CUDA-graph replay goes, stage by stage.

    PYTHONPATH=$PWD python benchmarks/host_path_gpu.py [llama gpt2 ...] [--out DIR]

A steady call of ``tensorplay_graph.compile(model)`` runs, before the GPU gets any work: the
generated entry's checks (arguments, program state, module attributes), the autograd-region
runner's grad-mode check, then the CUDA-graph runner's own checks (inputs in place, outputs
still held, cached weights current) and the launch. The GPU idles through all of it after a
synchronizing caller. Per model, over 200 synchronized calls, this prints the median
microseconds of each stage (timestamps taken by wrappers around the next stage's entry), the
threads alive, and cProfile's callees of the two runners.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

import torch

import tensorplay_graph as tpg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models_gpu import MODELS  # noqa: E402


class _Stamp:
    """Calls ``target`` after noting the time in ``stamps[key]``; other attributes pass."""

    def __init__(self, target, stamps, key, method=None):
        self._target, self._stamps, self._key, self._method = target, stamps, key, method

    def __getattr__(self, name):
        if name == self._method:
            def stamped(*args, **kwargs):
                self._stamps[self._key] = time.perf_counter()
                return getattr(self._target, name)(*args, **kwargs)
            return stamped
        return getattr(self._target, name)

    def __call__(self, *args, **kwargs):
        self._stamps[self._key] = time.perf_counter()
        return self._target(*args, **kwargs)


def stages(fn, inputs, spec, calls=200):
    """Median us of: entry checks, the autograd-region runner, the graph runner before launch."""
    region = spec.runner
    graph_runner = getattr(region, "_lowered", None)
    if not hasattr(graph_runner, "ops"):
        return {"error": f"no CUDA-graph runner under {type(region).__name__}: "
                         f"{type(graph_runner).__name__}"}
    stamps, rows = {}, []
    region._lowered = _Stamp(graph_runner, stamps, "graph_runner")
    ops = graph_runner.ops
    graph_runner.ops = _Stamp(ops, stamps, "launch", method="replay")
    entry_globals = spec.entry.__globals__ if spec.entry else {}
    run_names = [k for k, v in entry_globals.items() if k.startswith("run") and v is region]
    for name in run_names:
        entry_globals[name] = _Stamp(region, stamps, "region_runner")
    try:
        for _ in range(calls):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn(*inputs)
            rows.append((stamps.get("region_runner", start) - start,
                         stamps["graph_runner"] - stamps.get("region_runner", start),
                         stamps["launch"] - stamps["graph_runner"]))
    finally:
        for name in run_names:
            entry_globals[name] = region
        region._lowered = graph_runner
        graph_runner.ops = ops
    torch.cuda.synchronize()
    names = ("entry_checks_us", "region_runner_us", "graph_runner_us")
    return {n: round(statistics.median(r[i] for r in rows) * 1e6, 2) for i, n in enumerate(names)}


def callees(fn, inputs, calls=100):
    import cProfile
    import io
    import pstats
    profiler = cProfile.Profile()
    for _ in range(calls):
        torch.cuda.synchronize()
        profiler.enable()
        fn(*inputs)
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_callees("autograd_regions.py:.*__call__")
    stats.print_callees("cuda_graphs.py:.*__call__")
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=["llama"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for name in args.models:
        torch.manual_seed(0)
        model, inputs = MODELS[name]()
        model = model.to("cuda", torch.bfloat16).eval()
        inputs = tuple(a.to("cuda") for a in inputs)
        with torch.no_grad():
            fn = tpg.compile(model)
            for _ in range(4):
                fn(*inputs)
            spec = next(iter(fn.specializations.values()))
            row = {"model": name, **stages(fn, inputs, spec),
                   "threads": [t.name for t in threading.enumerate()]}
            print(json.dumps(row), flush=True)
            print(callees(fn, inputs), flush=True)
        rows.append(row)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "host_path.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
