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
import sys
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
    sys.path[:0] = [str(ROOT / "tests" / "fuzz"), str(ROOT)]
    from fuzz_check import check, shrink
    from fuzz_gen import generate
    from fuzz_program import repro_source
    from grad_check import check_grad, entry_for
    from grad_gen import generate_grad
    from grad_repro import grad_repro_source, shrink_grad
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        if args.grad:
            entry = entry_for(seed)
            program = generate_grad(seed, args.framework)
            outcome = check_grad(program, entry)
            if outcome.failed:
                small, small_outcome = shrink_grad(program, entry, outcome, args.shrink_s)
                source = grad_repro_source(small, entry, small_outcome.detail)
        else:
            entry = args.backend
            program = generate(seed, args.framework, big=entry in ("auto", "tilelang") and seed % 8 == 0)
            outcome = check(program, entry)
            if outcome.failed:
                small, small_outcome = shrink(program, entry, outcome, args.shrink_s)
                source = repro_source(small, entry, small_outcome.detail)
        print(f"seed {seed} {entry}: {outcome.status} {outcome.detail}", flush=True)
        if outcome.failed:
            name = out / f"{args.framework}-{entry}-{seed}.py"
            name.write_text(source)
            print(f"  minimal: {small_outcome.status} {small_outcome.detail} -> {name.name}", flush=True)


if __name__ == "__main__":
    main()
