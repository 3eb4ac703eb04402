"""Where a training step's wall time goes: host prologue, GPU busy, idle gaps, host epilogue.

    source benchmarks/gpu_setup.sh && python benchmarks/step_timeline_gpu.py gpt2 ours,inductor

For each mode, three synchronized steps (``training_gpu.step``) under torch.profiler with CPU
and CUDA activities. Per step (median over the three): ``wall_ms`` (the step's annotation),
``prologue_ms`` (step start to the first kernel's start: host work the GPU waits for),
``busy_ms`` (union of kernel intervals), ``gaps_ms`` (idle time between the first and the last
kernel), ``epilogue_ms`` (last kernel's end to the step's end), the largest gaps with the
kernels around them, the host ops that start before the first kernel, the top kernels, and which host ops
launched the copy / fill kernels (modes without CUDA graphs).
One JSON line per mode.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_modes import use_cache_root  # noqa: E402

use_cache_root("tpg_timeline_")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from training_gpu import MODELS, entry_points, step  # noqa: E402

STEPS = 3


def _union(intervals):
    busy, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy


def _analyse(events, top=8):
    steps = sorted((e for e in events if e.get("name") == "tpg_step" and e.get("ph") == "X"),
                   key=lambda e: e["ts"])
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    host = [e for e in events if e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation")
            and e.get("ph") == "X" and e.get("name") != "tpg_step"]
    rows = []
    for s in steps:
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        ks = [k for k in kernels if t0 <= k["ts"] <= t1]
        if not ks:
            continue
        first, last = ks[0]["ts"], max(k["ts"] + k["dur"] for k in ks)
        busy = _union([(k["ts"], k["ts"] + k["dur"]) for k in ks])
        gaps = []
        end = ks[0]["ts"] + ks[0]["dur"]
        prev = ks[0]
        for k in ks[1:]:
            if k["ts"] > end:
                gaps.append((k["ts"] - end, prev["name"][:60], k["name"][:60]))
            if k["ts"] + k["dur"] >= end:
                end, prev = k["ts"] + k["dur"], k
        gaps.sort(reverse=True)
        before = sorted(((h["ts"] - t0, h["dur"], h["name"][:60]) for h in host
                         if t0 <= h["ts"] < first), key=lambda x: -x[1])
        rows.append({
            "wall_ms": s["dur"] / 1e3, "prologue_ms": (first - t0) / 1e3,
            "busy_ms": busy / 1e3, "gaps_ms": (last - first - busy) / 1e3,
            "epilogue_ms": (t1 - last) / 1e3, "kernels": len(ks),
            "largest_gaps_us": [[round(g, 1), a, b] for g, a, b in gaps[:top]],
            "host_before_first_kernel": [[round(o / 1e3, 3), round(d / 1e3, 3), n]
                                         for o, d, n in before[:top]],
        })
    rows.sort(key=lambda r: r["wall_ms"])
    return rows[len(rows) // 2] if rows else {}


def _top_kernels(events, top=60):
    totals = {}
    for e in events:
        if e.get("cat") == "kernel":
            t = totals.setdefault(e["name"][:100], [0.0, 0])
            t[0] += e["dur"]
            t[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    return [[round(v[0] / STEPS / 1e3, 4), v[1] // STEPS, k] for k, v in ranked]


def _launchers(events, needle=("copy", "Fill", "fill"), top=6):
    """For kernels whose name holds one of ``needle``: the host op stack that launched them
    (through the launch's correlation id; without CUDA graphs only)."""
    runtime = {e["args"].get("correlation"): e for e in events
               if e.get("cat") == "cuda_runtime" and "args" in e}
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    found = {}
    for k in events:
        if k.get("cat") != "kernel" or not any(n in k["name"] for n in needle):
            continue
        launch = runtime.get(k.get("args", {}).get("correlation"))
        if launch is None:
            continue
        stack = sorted((o for o in ops if o["tid"] == launch["tid"] and
                        o["ts"] <= launch["ts"] <= o["ts"] + o["dur"]), key=lambda o: o["dur"])
        key = (k["name"][:50], " < ".join(o["name"][:40] for o in stack[:4]))
        t = found.setdefault(key, [0.0, 0])
        t[0] += k["dur"]
        t[1] += 1
    ranked = sorted(found.items(), key=lambda kv: -kv[1][0])[:top]
    return [[round(v[0] / STEPS / 1e3, 4), v[1] // STEPS, k[0], k[1]] for k, v in ranked]


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    modes = (sys.argv[2] if len(sys.argv) > 2 else "ours,inductor").split(",")
    torch.manual_seed(0)
    model, args = MODELS[name]()
    model = model.to("cuda", torch.bfloat16).eval()
    ids = args[0].to("cuda")
    for mode in modes:
        torch._dynamo.reset()
        fn = entry_points(model)[mode]()
        for _ in range(4):
            step(fn, model, ids)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(STEPS):
                with record_function("tpg_step"):
                    step(fn, model, ids)
                    torch.cuda.synchronize()
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        row = {"model": name, "mode": mode, **_analyse(events), "top_kernels": _top_kernels(events),
               "copy_launchers": _launchers(events)}
        print(json.dumps(row), flush=True)
        del fn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
