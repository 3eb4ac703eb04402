"""Where one steady call of a compiled model goes: graph replay vs the rest, top CUDA kernels.

    PYTHONPATH=$PWD python benchmarks/profile_gpu.py [gpt2|llama]

Prints JSON lines: the call (CUDA events), the CUDA-graph replay alone, the CPU time of one
call without synchronizing, and torch.profiler's top kernels by CUDA time over 3 calls.
"""

from __future__ import annotations

import json
import sys
import time

import torch

import tensorplay_graph as tpg

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from models_gpu import MODELS, first_tensor, steady_ms  # noqa: E402


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    torch.manual_seed(0)
    model, args = MODELS[name]()
    model = model.to("cuda", torch.bfloat16).eval()
    args = tuple(a.to("cuda") for a in args)
    with torch.no_grad():
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
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fn(*args)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70))
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=15, max_name_column_width=70))


if __name__ == "__main__":
    main()
