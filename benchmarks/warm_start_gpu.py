"""First call cold vs warm: each compiler in a fresh process, twice, on one cache root.

    PYTHONPATH=$PWD python benchmarks/warm_start_gpu.py --out $OUT [--models gpt2,llama]
        [--modes inductor,ours]

Round 1 starts every (model, mode) in a new process with empty caches (cold); round 2 starts a
new process on the same cache root (warm disk caches, nothing in memory). Each round runs
``models_gpu.py`` for one model and one mode, so no compiler profits from another's work in
the same process. Prints one JSON line per (model, mode) with both first-call times and the
warm ratio against Inductor's warm start (the issue-11 target: ours at most 1/5 of Inductor's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def first_call_s(model: str, mode: str, cache: str, out: str) -> dict:
    env = dict(os.environ, TPG_BENCH_CACHE=cache)
    cmd = [sys.executable, os.path.join(HERE, "models_gpu.py"), "--models", model, "--modes", mode,
           "--out", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    rows = [json.loads(line) for line in proc.stdout.splitlines()
            if line.startswith("{") and '"mode"' in line]
    if not rows or "first_call_s" not in rows[-1]:
        return {"error": (proc.stderr or proc.stdout).strip()[-600:]}
    row = rows[-1]
    if proc.stderr and os.environ.get("TPG_BENCH_PROFILE_FIRST"):
        sys.stderr.write(proc.stderr[-12000:])
    return {"first_call_s": row["first_call_s"], "ms": row.get("ms"), "ok": row.get("ok")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out")
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--modes", default="inductor,ours")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for model in args.models.split(","):
        warm = {}
        for mode in args.modes.split(","):
            cache = tempfile.mkdtemp(prefix=f"warm_{model}_{mode}_")
            cold = first_call_s(model, mode, cache, args.out)
            again = first_call_s(model, mode, cache, args.out)
            row = {"model": model, "mode": mode, "cold": cold, "warm": again}
            warm[mode] = again.get("first_call_s")
            if mode != "inductor" and warm.get("inductor") and warm[mode] is not None:
                row["warm_vs_inductor_warm"] = round(warm[mode] / warm["inductor"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(args.out, "warm_start_gpu.json"), "w") as handle:
        json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
