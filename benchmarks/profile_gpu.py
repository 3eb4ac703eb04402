"""Where one steady call of a compiled model goes: graph replay vs the rest, top CUDA kernels.

    PYTHONPATH=$PWD python benchmarks/profile_gpu.py [gpt2|llama|resnet50] [ours|inductor] [train]

Prints JSON lines: the call (CUDA events), the CUDA-graph replay alone, the CPU time of one
call without synchronizing, and torch.profiler's top kernels by CUDA time over 3 calls (ours
without CUDA graphs, so that each kernel shows). ``train`` profiles one training step instead
(``training_gpu.step``: forward, loss, backward), with the host-side ops that cost the most.
Kernels that are not GEMMs, attention or our own (fills, copies, memsets) are listed with the
framework op that launched them and its callers (``"who"`` lines).
"""

from __future__ import annotations

import json
import sys
import time

import torch

import tensorplay_graph as tpg

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_modes import steady_ms  # noqa: E402
from models_gpu import first_tensor, load  # noqa: E402


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    mode = sys.argv[2] if len(sys.argv) > 2 else "ours"
    if sys.argv[3:4] == ["train"]:
        return profile_training(name, mode)
    model, args = load(name)
    with torch.no_grad():
        if mode == "inductor":
            return profile_calls(name, mode, torch.compile(model), args)
        fn = tpg.compile(model)
        for _ in range(4):
            first_tensor(fn(*args))
        torch.cuda.synchronize()
        row = {"model": name, "call_ms": round(steady_ms(fn, args), 3)}
        runner = next(iter(fn.specializations.values())).lowered
        graph = getattr(runner, "_graph", None)
        if graph is not None:
            row["replay_ms"] = round(steady_ms(lambda: graph.replay(), ()), 3)
        start = time.perf_counter()
        for _ in range(10):
            fn(*args)
        row["cpu_ms_per_call_unsynced"] = round((time.perf_counter() - start) * 100, 3)
        torch.cuda.synchronize()
        row["state"] = getattr(runner, "cuda_graphs", None)
        print(json.dumps(row), flush=True)
        host_profile(fn, args)
        profile_calls(name, mode, tpg.compile(model, options={"cuda_graphs": False}), args)


def profile_training(name, mode):
    """One training step of ``mode`` (``ours``, ``ours_nographs`` or ``inductor``)."""
    from training_gpu import MODELS as TRAINING, entry_points, step
    torch.manual_seed(0)
    model, args = TRAINING[name]()
    model = model.to("cuda", torch.bfloat16).eval()
    ids = args[0].to("cuda")
    fn = entry_points(model)[mode]()
    for _ in range(3):
        step(fn, model, ids)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        step(fn, model, ids)
    cpu_ms = (time.perf_counter() - start) * 200
    torch.cuda.synchronize()
    print(json.dumps({"model": name, "mode": mode, "train": True,
                      "cpu_ms_per_step_unsynced": round(cpu_ms, 3)}), flush=True)
    profile_calls(name, mode, lambda: step(fn, model, ids), (), host_ops=12)


def profile_calls(name, mode, fn, args, calls=3, host_ops=0):
    """torch.profiler's top CUDA kernels over ``calls`` steady calls, one JSON line each."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(4):
        fn(*args)
    torch.cuda.synchronize()
    print(json.dumps({"model": name, "mode": mode, "call_ms_no_graphs": round(steady_ms(fn, args), 3)}))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    # Kernels carry self device time; framework ops only inherit their kernels' time.
    events = [e for e in prof.key_averages() if e.self_device_time_total > 0]
    events.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in events) / calls / 1e3
    print(json.dumps({"model": name, "mode": mode, "gpu_busy_ms": round(total, 3)}))
    for e in events[:40]:
        print(json.dumps({"ms": round(e.self_device_time_total / calls / 1e3, 4), "n": e.count // calls,
                          "kernel": e.key[:110]}))
    who(fn, args)
    if host_ops:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(calls):
                fn(*args)
            torch.cuda.synchronize()
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        for e in ops[:host_ops]:
            print(json.dumps({"host_ms": round(e.self_cpu_time_total / calls / 1e3, 4),
                              "n": e.count // calls, "op": e.key[:110]}))


def host_profile(fn, args, calls=200, top=25):
    """cProfile of ``calls`` steady calls (graphs on, one sync per call, as ``steady_ms``
    times them): where the host time before and around each replay goes."""
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn(*args)
        torch.cuda.synchronize()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]  # by own time
    for (path, line, name), (_, ncalls, tottime, cumtime, _) in rows:
        print(json.dumps({"host_us_per_call": round(tottime / calls * 1e6, 2),
                          "cum_us": round(cumtime / calls * 1e6, 2), "n": ncalls // calls,
                          "fn": f"{path.rsplit('/', 2)[-1]}:{line}:{name}"}))


_SMALL = ("Fill", "elementwise_kernel", "Memset", "gather", "copy", "Copy", "cutlass_80")


def who(fn, args):
    """One call: per kernel whose name has one of ``_SMALL``, the op chain that launched it."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    seen = {}
    for event in prof.events():
        for kernel in getattr(event, "kernels", []) or []:
            name = getattr(kernel, "name", str(kernel))
            if not any(s in name for s in _SMALL):
                continue
            chain, parent = [event.name], event.cpu_parent
            while parent is not None and len(chain) < 5:
                chain.append(parent.name)
                parent = parent.cpu_parent
            key = (name[:60], " < ".join(chain))
            seen[key] = seen.get(key, 0) + 1
    for (kernel, chain), n in sorted(seen.items(), key=lambda kv: -kv[1]):
        print(json.dumps({"who": chain, "kernel": kernel, "n": n}))


if __name__ == "__main__":
    main()
