"""Check chosen fuzz seeds again, printing each outcome in full and writing minimal repros.

    python benchmarks/fuzz_seeds.py --backend auto --device cuda --out DIR SEED [SEED ...]
    python benchmarks/fuzz_seeds.py --grad --device cuda --out DIR SEED [SEED ...]

For the seeds ``fuzz.py`` / ``fuzz_gpu.sh`` reported (their tables normalize numbers away).
``--grad`` checks the training programs through ``grad_check.entry_for(seed)``, as
``fuzz.py --grad --backend rotate`` does.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("seeds", type=int, nargs="+")
    p.add_argument("--framework", default="torch", choices=["torch", "tensorplay"])
    p.add_argument("--backend", default="auto", help="output programs' backend")
    p.add_argument("--grad", action="store_true", help="training programs (entry: rotate)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--shrink-s", type=float, default=20.0)
    p.add_argument("--out", default=str(ROOT / "out" / "fuzz_seeds"))
    args = p.parse_args()
    os.environ["TPG_FUZZ_DEVICE"] = args.device  # read by tests/fuzz/fuzz_program.py
    from fuzz import seed_job  # benchmarks/fuzz.py: also puts tests/fuzz on the path
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    backend = "rotate" if args.grad else args.backend
    for seed in args.seeds:
        big = backend in ("auto", "tilelang") and seed % 8 == 0  # fuzz.py's default
        job = seed_job(seed, args.framework, backend, args.grad, args.shrink_s, big)
        outcome = job.run(job.program)
        print(f"seed {seed} {job.entry}: {outcome.status} {outcome.detail}", flush=True)
        if outcome.failed:
            small, small_outcome = job.shrink(job.program, outcome)
            name = out / f"{args.framework}-{job.entry}-{seed}.py"
            name.write_text(job.source(small, small_outcome.detail))
            print(f"  minimal: {small_outcome.status} {small_outcome.detail} -> {name.name}",
                  flush=True)

if __name__ == "__main__":
    main()
