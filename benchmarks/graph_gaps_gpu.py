"""Where a CUDA-graph replay of a compiled model spends the time between its kernels.

    PYTHONPATH=$PWD python benchmarks/graph_gaps_gpu.py [llama|gpt2|resnet50] [--out DIR]

Compiles the model as ``models_gpu.py`` does (bf16, eval, no_grad, ``tensorplay_graph.compile``),
lets the runner capture its graph, then traces three replays with torch.profiler (CUPTI records
the kernels and memsets a graph launches, one event each) and prints one JSON line per model:
the replay's span (first kernel start to last kernel end, per replay, median), the kernels'
own time, the idle time between consecutive nodes, the node count, and the largest gaps with
the nodes on either side; and the host time from entering a call to the graph's launch
(the GPU idles through it), with cProfile's costliest functions. A gap is the GPU doing nothing between two graph nodes: dependency
resolution and launch of the next node, which no kernel tuning recovers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

import tensorplay_graph as tpg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_modes import steady_ms  # noqa: E402
from models_gpu import load  # noqa: E402


def trace_replays(graph, replays: int = 3):
    """Per replay, the device events (kernels and memsets) in start order."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
            torch.cuda.synchronize()
            time.sleep(0.002)  # a device gap no replay has inside: where the next one starts
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    device = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")
                     and "dur" in e), key=lambda e: e["ts"])
    # replays are 2 ms apart: split where the device idles for over 1 ms
    runs, current = [], []
    for event in device:
        if current and event["ts"] - (current[-1]["ts"] + current[-1]["dur"]) > 1000:
            runs.append(current)
            current = []
        current.append(event)
    if current:
        runs.append(current)
    return runs


def pre_replay_us(fn, inputs, runner, calls=100):
    """Median host time from entering the compiled call to the graph's launch: the GPU idles
    through it (the caller synchronized after the previous call)."""
    ops, launched = runner.ops, []

    class Spy:
        def __getattr__(self, name):
            return getattr(ops, name)

        def replay(self, graph):
            launched.append(time.perf_counter())
            ops.replay(graph)

    runner.ops = Spy()
    times = []
    try:
        for _ in range(calls):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn(*inputs)
            times.append((launched[-1] - start) * 1e6)
    finally:
        runner.ops = ops
    torch.cuda.synchronize()
    return round(statistics.median(times), 2)


def host_top(fn, inputs, calls=100, top=15):
    """cProfile of ``calls`` synchronized calls: own time per call of the costliest functions."""
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    for _ in range(calls):
        torch.cuda.synchronize()
        profiler.enable()
        fn(*inputs)
        profiler.disable()
    torch.cuda.synchronize()
    rows = sorted(pstats.Stats(profiler).stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [(round(tottime / calls * 1e6, 2), f"{path.rsplit('/', 2)[-1]}:{line}:{name}")
            for (path, line, name), (_, _, tottime, _, _) in rows]


def summarize(run):
    span = run[-1]["ts"] + run[-1]["dur"] - run[0]["ts"]
    busy = sum(e["dur"] for e in run)
    gaps = []
    for before, after in zip(run, run[1:]):
        gap = after["ts"] - (before["ts"] + before["dur"])
        gaps.append((gap, before["name"][:60], after["name"][:60]))
    idle = sum(max(g, 0.0) for g, _, _ in gaps)
    return {"span_us": span, "busy_us": busy, "idle_us": idle, "nodes": len(run),
            "memsets": sum(1 for e in run if e.get("cat") == "gpu_memset"),
            "gaps": sorted(gaps, reverse=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=["llama"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for name in args.models:
        model, inputs = load(name)
        with torch.no_grad():
            fn = tpg.compile(model)
            for _ in range(4):
                fn(*inputs)
            runner = next(iter(fn.specializations.values())).lowered
            graph = getattr(runner, "_graph", None)
            if graph is None:
                print(json.dumps({"model": name, "error": f"no graph: {runner.cuda_graphs}"}))
                continue
            row = {"model": name, "call_ms": round(steady_ms(fn, inputs), 4),
                   "replay_ms": round(steady_ms(lambda: graph.replay(), ()), 4),
                   "pre_replay_us": pre_replay_us(fn, inputs, runner),
                   "host_top_us": host_top(fn, inputs)}
        runs = [summarize(run) for run in trace_replays(graph)]
        for key in ("span_us", "busy_us", "idle_us", "nodes", "memsets"):
            row[key] = round(statistics.median(r[key] for r in runs), 2)
        row["largest_gaps_us"] = [(round(g, 2), a, b) for g, a, b in runs[-1]["gaps"][:12]]
        gaps = [g for g, _, _ in runs[-1]["gaps"]]
        row["gap_median_us"] = round(statistics.median(gaps), 2) if gaps else None
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "graph_gaps.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
