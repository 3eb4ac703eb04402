"""Where a training step's reserved GPU memory is: one line per allocator pool.

    source benchmarks/gpu_setup.sh && python benchmarks/memory_pools_gpu.py gpt2 [ours|inductor]

Runs five steps of ``training_gpu.py``'s step (``zero_grad(set_to_none=True)``, forward with
labels, ``backward()``), frees what the allocator can, then reads ``torch.cuda.memory_snapshot()``:
per pool (the default pool, and each CUDA-graph pool) the reserved and allocated bytes, the
number of segments and the largest blocks with their state. Prints JSON lines. ``--stacks``
records allocation history from the start and prints, for every live block of 16 MB or more
in the default pool, the Python frames that allocated it.
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


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name = args[0] if args else "gpt2"
    mode = args[1] if len(args) > 1 else "ours"
    stacks = "--stacks" in sys.argv
    if stacks:
        torch.cuda.memory._record_memory_history(max_entries=200000)
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
    explain = getattr(fn, "explain", None)
    if explain is not None:
        print("\n".join(line for line in explain().splitlines() if "cuda graphs" in line))


if __name__ == "__main__":
    main()
