"""Where a training step's reserved GPU memory is: one line per allocator pool.

    source benchmarks/gpu_setup.sh && python benchmarks/memory_pools_gpu.py gpt2 [ours|inductor]

Runs five steps of ``training_gpu.py``'s step (``zero_grad(set_to_none=True)``, forward with
labels, ``backward()``), frees what the allocator can, then reads ``torch.cuda.memory_snapshot()``:
per pool (the default pool, and each CUDA-graph pool) the reserved and allocated bytes, the
number of segments and the largest blocks with their state. Prints JSON lines. ``--stacks``
records allocation history from the start and prints, for every live block of 16 MB or more
in the default pool, the Python frames that allocated it. ``--trace`` records one more step
and prints the step's peak reserved and allocated bytes in this fresh process (the figures to
compare between modes: one process each, nothing left by another mode), the default pool's
peak during it (a graph pool's size is fixed between steps) with the blocks live at that
moment and the new segments the step allocated, each with the frames that allocated it, and
the default-pool segments a live block keeps from being released.
"""

from __future__ import annotations

import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_modes import use_cache_root  # noqa: E402

use_cache_root("tpg_pools_")

import torch  # noqa: E402

from training_gpu import MODELS, entry_points, step  # noqa: E402

MB = 2 ** 20


def pools() -> list:
    rows = collections.OrderedDict()
    for segment in torch.cuda.memory_snapshot():
        pool = str(tuple(segment.get("segment_pool_id", (0, 0))))
        row = rows.setdefault(pool, {"pool": pool, "reserved_mb": 0.0, "allocated_mb": 0.0,
                                     "segments": 0, "blocks": []})
        row["reserved_mb"] += segment["total_size"] / MB
        row["allocated_mb"] += segment["allocated_size"] / MB
        row["segments"] += 1
        row["blocks"] += [(round(b["size"] / MB, 1), b["state"][:5]) for b in segment["blocks"]]
    for row in rows.values():
        row["reserved_mb"], row["allocated_mb"] = round(row["reserved_mb"]), round(row["allocated_mb"])
        row["blocks"] = sorted(row["blocks"], reverse=True)[:16]
    return list(rows.values())


def live_stacks(min_mb: float = 16.0) -> list:
    """(MB, frames) of the default pool's live blocks of ``min_mb`` or more."""
    found = []
    for segment in torch.cuda.memory._snapshot()["segments"]:
        if tuple(segment.get("segment_pool_id", (0, 0))) != (0, 0):
            continue
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" and block["size"] >= min_mb * MB:
                frames = [f"{f['filename'].rsplit('/', 2)[-1]}:{f['line']}:{f['name']}"
                          for f in block.get("frames", []) if ".py" in f["filename"]]
                found.append((round(block["size"] / MB, 1), frames[:12]))
    return found


def _frames(entry: dict, keep: int = 8) -> list:
    """The Python frames of a trace entry or block, innermost first, ours and the model's."""
    return [f"{f['filename'].rsplit('/', 2)[-1]}:{f['line']}:{f['name']}"
            for f in entry.get("frames", []) if ".py" in f["filename"]
            and "/torch/" not in f["filename"]][:keep]


def pinned(min_free_mb: float = 16.0) -> list:
    """Default-pool segments holding ``min_free_mb`` or more free: the live blocks that keep
    each from being released (``empty_cache`` frees only segments with no live block)."""
    rows = []
    for segment in torch.cuda.memory._snapshot()["segments"]:
        if tuple(segment.get("segment_pool_id", (0, 0))) != (0, 0):
            continue
        free = sum(b["size"] for b in segment["blocks"] if b["state"] != "active_allocated")
        if free >= min_free_mb * MB:
            rows.append({"segment_mb": round(segment["total_size"] / MB, 1),
                         "free_mb": round(free / MB, 1), "stream": segment.get("stream"),
                         "live": [(round(b["size"] / MB, 2), _frames(b, 5))
                                  for b in segment["blocks"] if b["state"] == "active_allocated"]})
    return rows


def step_peak(run_step) -> list:
    """JSON rows: the default pool over one ``run_step()`` (history must be recording)."""
    before = torch.cuda.memory._snapshot()
    start = len(before["device_traces"][0])
    graph_mb = sum(s["total_size"] for s in before["segments"]
                   if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0)) / MB
    live, reserved = {}, 0
    for segment in before["segments"]:
        if tuple(segment.get("segment_pool_id", (0, 0))) == (0, 0):
            reserved += segment["total_size"]
            for block in segment["blocks"]:
                if block["state"] == "active_allocated":
                    live[block["address"]] = (block["size"], _frames(block), "before the step")
    torch.cuda.reset_peak_memory_stats()
    run_step()
    torch.cuda.synchronize()
    peaks = {"step_peak_reserved_mb": round(torch.cuda.max_memory_reserved() / MB),
             "step_peak_allocated_mb": round(torch.cuda.max_memory_allocated() / MB)}
    events = torch.cuda.memory._snapshot()["device_traces"][0][start:]
    allocated = sum(size for size, _, _ in live.values())
    rows = [{"graph_pools_mb": round(graph_mb), "default_reserved_mb_at_start": round(reserved / MB),
             "default_allocated_mb_at_start": round(allocated / MB), "events": len(events),
             **peaks}]
    peak, at_peak, new_segments = reserved, dict(live), []
    for event in events:
        action, addr, size = event["action"], event["addr"], event["size"]
        if action == "alloc":
            live[addr] = (size, _frames(event), "in the step")
        elif action in ("free_requested", "free_completed"):
            live.pop(addr, None)
        elif action in ("segment_alloc", "segment_map"):
            reserved += size
            new_segments.append({"segment_mb": round(size / MB, 1), "frames": _frames(event)})
        elif action in ("segment_free", "segment_unmap"):
            reserved -= size
        if reserved > peak:
            peak, at_peak = reserved, dict(live)
    rows.append({"default_peak_reserved_mb": round(peak / MB),
                 "allocated_at_that_peak_mb": round(sum(v[0] for v in at_peak.values()) / MB)})
    for size, frames, when in sorted(at_peak.values(), key=lambda v: -v[0])[:14]:
        rows.append({"live_at_peak_mb": round(size / MB, 1), "allocated": when, "frames": frames})
    rows += sorted(new_segments, key=lambda r: -r["segment_mb"])[:10]
    return rows


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name = args[0] if args else "gpt2"
    mode = args[1] if len(args) > 1 else "ours"
    stacks, trace = "--stacks" in sys.argv, "--trace" in sys.argv
    if stacks or trace:
        torch.cuda.memory._record_memory_history(max_entries=2000000, stacks="python")
    torch.manual_seed(0)
    model, args = MODELS[name]()
    model = model.to("cuda", torch.bfloat16).eval()
    ids = args[0].cuda()
    fn = entry_points(model)[mode]()
    for _ in range(5):
        step(fn, model, ids)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    print(json.dumps({"model": name, "mode": mode,
                      "reserved_mb": round(torch.cuda.memory_reserved() / MB),
                      "allocated_mb": round(torch.cuda.memory_allocated() / MB)}))
    for row in pools():
        print(json.dumps(row))
    if stacks:
        for size, frames in live_stacks():
            print(json.dumps({"live_mb": size, "frames": frames}))
    if trace:
        for row in pinned():
            print(json.dumps(row))
        for row in step_peak(lambda: step(fn, model, ids)):
            print(json.dumps(row))
    explain = getattr(fn, "explain", None)
    if explain is not None:
        print("\n".join(line for line in explain().splitlines() if "cuda graphs" in line))


if __name__ == "__main__":
    main()
