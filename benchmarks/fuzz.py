"""Long-mode differential fuzzer: compiled vs eager over many random programs.

    python benchmarks/fuzz.py --n 20000 --framework torch --backend reference
    python benchmarks/fuzz.py --n 500 --framework all --backend reference auto tilelang interpreter
    python benchmarks/fuzz.py --grad --n 2000 --framework all --backend rotate
    python benchmarks/fuzz.py --n 500 --framework torch --backend auto --device cuda

``--grad`` fuzzes training instead (tests/fuzz/grad_gen.py, grad_check.py): random
differentiable programs, compiled forward + backward vs eager autograd, through the training
entry points ``reference`` / ``auto`` / ``framework`` (torch.compile or tp.compile), or
``rotate`` (each program through one: ``grad_check.entry_for``, as the CI test does).

Prints programs / mismatches / crashes / skipped per framework x backend and writes
each failing program's minimal (shrunk) repro to ``--out`` (one self-contained
``.py`` per failure). Programs run in child processes of ``--chunk`` seeds, so an
eager or compiled crash that kills the process (a segfault) is counted, not fatal.
The generator and checker live in ``tests/fuzz`` (the CI test runs a fixed seed set).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
sys.path.insert(0, str(ROOT))
logger = logging.getLogger("fuzz")


class SeedJob(NamedTuple):
    """One seed's program and how to check it, shrink a failure and write its repro."""

    entry: str
    program: Any
    run: Callable[[Any], Any]
    shrink: Callable[[Any, Any], Any]
    source: Callable[[Any, str], str]


def seed_job(seed: int, framework: str, backend: str, grad: bool, shrink_s: float,
             big: bool = False) -> SeedJob:
    """The output program of ``seed`` through ``backend``, or with ``grad`` its training
    program through ``backend`` (``rotate``: ``grad_check.entry_for(seed)``)."""
    if grad:
        from grad_check import check_grad, entry_for
        from grad_gen import generate_grad
        from grad_repro import grad_repro_source, shrink_grad
        entry = entry_for(seed) if backend == "rotate" else backend
        return SeedJob(entry, generate_grad(seed, framework), lambda p: check_grad(p, entry),
                       lambda p, o: shrink_grad(p, entry, o, shrink_s),
                       lambda p, note: grad_repro_source(p, entry, note))
    from fuzz_check import check, shrink
    from fuzz_gen import generate
    from fuzz_program import repro_source
    return SeedJob(backend, generate(seed, framework, big=big), lambda p: check(p, backend),
                   lambda p, o: shrink(p, backend, o, shrink_s),
                   lambda p, note: repro_source(p, backend, note))


def worker(args: argparse.Namespace) -> None:
    """Check seeds [start, stop) and print one JSON line per event (parent parses them)."""
    from fuzz_check import Outcome

    def timeout(*_):
        raise TimeoutError(f"program took longer than {args.timeout_s} s")

    signal.signal(signal.SIGALRM, timeout)
    out, backend = Path(args.out), args.backend[0]
    for seed in range(args.start, args.stop):
        big = args.big_every > 0 and seed % args.big_every == 0
        print(json.dumps({"start": seed}), flush=True)
        entry, program, run, small_of, source = seed_job(seed, args.framework, backend, args.grad,
                                                         args.shrink_s, big)
        print(json.dumps({"generated": seed}), flush=True)  # eager ran every statement
        signal.alarm(args.timeout_s)
        try:
            outcome = run(program)
        except TimeoutError as exc:
            outcome = Outcome("crash", f"TimeoutError: {exc}")
        finally:
            signal.alarm(0)
        record = {"seed": seed, "status": outcome.status, "signature": outcome.signature()}
        if outcome.status == "ok" and outcome.detail:  # trained through eager autograd
            record["eager"] = outcome.signature()
        if outcome.failed:
            small, small_outcome = small_of(program, outcome)
            name = f"{args.framework}-{entry}-{seed}.py"
            (out / name).write_text(source(small, small_outcome.detail))
            record.update(repro=name, small_signature=small_outcome.signature())
        print(json.dumps(record), flush=True)


def run_cell(args: argparse.Namespace, framework: str, backend: str, counts: Counter) -> Counter:
    """Check the cell's seeds chunk by chunk, adding to ``counts``; after each chunk the
    running tally (with the next seed) is written to ``<out>/tally-<framework>-<backend>.json``,
    so a run stopped early still says exactly what it checked."""
    seed = args.seed_start
    stop = args.seed_start + args.n
    tally = Path(args.out) / f"tally-{framework}-{backend}.json"
    while seed < stop:
        tally.write_text(json.dumps({"seed_start": args.seed_start, "next_seed": seed,
                                     "counts": dict(counts)}, indent=1))
        chunk_stop = min(stop, seed + args.chunk)
        cmd = [sys.executable, __file__, "--worker", "--framework", framework, "--backend", backend,
               "--start", str(seed), "--stop", str(chunk_stop), "--out", args.out,
               "--shrink-s", str(args.shrink_s), "--big-every", str(args.big_every),
               "--timeout-s", str(args.timeout_s)] + (["--grad"] if args.grad else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        last_started, done, generated = None, set(), set()
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if "start" in rec:
                last_started = rec["start"]
                continue
            if "generated" in rec:
                generated.add(rec["generated"])
                continue
            done.add(rec["seed"])
            counts[rec["status"]] += 1
            if "eager" in rec:
                counts["eager"] += 1
                counts["sig:" + rec["eager"]] += 1
            if rec["status"] == "skip":  # eager rejected the program, is not deterministic,
                # or the mismatch is rounding (tests/fuzz/fuzz_check.ROUNDING_VERDICTS)
                from fuzz_check import ROUNDING_VERDICTS
                counts["sig:skip: " + rec["signature"].split(":")[1].strip()] += 1
                counts["ill-conditioned"] += rec["signature"].startswith(
                    tuple("skip: " + v for v in ROUNDING_VERDICTS))
            if rec["status"] in ("mismatch", "crash"):
                counts["sig:" + rec.get("small_signature", rec["signature"])] += 1
                logger.warning("%s/%s seed %d: %s -> %s", framework, backend, rec["seed"],
                               rec["signature"], rec.get("repro"))
        if proc.returncode != 0 and last_started is not None and last_started not in generated:
            # The generator keeps a statement only if eager runs it: eager itself died
            # (TensorPlay 1.0.0: SIGFPE on an integer division by zero). Not a program.
            counts["skip"] += 1
            counts[f"sig:skip: eager died generating the program (rc {proc.returncode})"] += 1
            logger.warning("%s/%s seed %d: eager killed the process while generating (rc %d)",
                           framework, backend, last_started, proc.returncode)
            seed = last_started + 1
        elif proc.returncode != 0 and last_started is not None and last_started not in done:
            counts["crash"] += 1
            counts[f"sig:crash: process died (rc {proc.returncode})"] += 1
            logger.warning("%s/%s seed %d killed the process (rc %d): %s", framework, backend,
                           last_started, proc.returncode, proc.stderr.strip()[-300:])
            seed = last_started + 1
        elif proc.returncode != 0 and done and max(done) == chunk_stop - 1:
            # Every seed reported, then the process died on exit (TensorPlay 1.0.0's heap
            # damage surfaces at interpreter shutdown): the chunk is complete.
            logger.warning("%s/%s worker for seeds %d..%d died on exit (rc %d)", framework,
                           backend, seed, chunk_stop - 1, proc.returncode)
            seed = chunk_stop
        elif proc.returncode != 0:  # died while importing or building the first program
            counts["crash"] += 1
            counts[f"sig:crash: worker died before a program (rc {proc.returncode})"] += 1
            logger.warning("%s/%s worker for seeds %d.. died (rc %d): %s", framework, backend,
                           seed, proc.returncode, proc.stderr.strip()[-300:])
            seed += 1
        else:
            seed = chunk_stop
    tally.write_text(json.dumps({"seed_start": args.seed_start, "next_seed": seed,
                                 "counts": dict(counts)}, indent=1))
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200, help="programs per framework x backend")
    p.add_argument("--framework", default="all", choices=["torch", "tensorplay", "all"])
    p.add_argument("--backend", nargs="+", default=["reference"],
                   help="reference / auto / tilelang / interpreter (triton: tests/interp)")
    p.add_argument("--seed-start", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "out" / "fuzz"), help="directory for repros")
    p.add_argument("--shrink-s", type=float, default=30.0, help="shrink budget per failure")
    p.add_argument("--big-every", type=int, default=-1,
                   help="every k-th program uses 64Ki+ element tensors (default: 8 for "
                        "tilelang / auto, never otherwise)")
    p.add_argument("--chunk", type=int, default=250, help="programs per child process")
    p.add_argument("--timeout-s", type=int, default=300, help="per program, counted as a crash")
    p.add_argument("--grad", action="store_true",
                   help="fuzz training (forward + backward) through the entry points "
                        "reference / auto / framework, or rotate (grad_check.entry_for)")
    p.add_argument("--device", default=os.environ.get("TPG_FUZZ_DEVICE", "cpu"),
                   help="where the checks run each program (cpu, cuda); the generator always "
                        "runs on the CPU, so a seed is the same program everywhere")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, help=argparse.SUPPRESS)
    p.add_argument("--stop", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ["TPG_FUZZ_DEVICE"] = args.device  # read by tests/fuzz/fuzz_program.py
    if args.worker:
        return worker(args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    os.makedirs(args.out, exist_ok=True)
    frameworks = ["torch", "tensorplay"] if args.framework == "all" else [args.framework]
    rows = []
    for backend in args.backend:
        for framework in frameworks:
            cell = argparse.Namespace(**vars(args))
            if cell.big_every < 0:
                cell.big_every = 8 if backend in ("tilelang", "auto") else 0
            t0 = time.monotonic()
            counts: Counter = Counter()
            try:
                run_cell(cell, framework, backend, counts)
            except KeyboardInterrupt:  # SIGINT / SIGTERM: report what was checked so far
                rows.append((framework, backend, counts, time.monotonic() - t0))
                logger.warning("stopped early: the table counts the chunks checked so far")
                break
            rows.append((framework, backend, counts, time.monotonic() - t0))
        else:
            continue
        break
    lines = ["| framework | backend | programs | mismatches | crashes | skipped | of which "
             "rounding (ill-conditioned, eager's) | seconds |" + (" eager autograd |" if args.grad else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if args.grad else "")]
    for framework, backend, c, secs in rows:
        programs = c["ok"] + c["mismatch"] + c["crash"]
        lines.append(f"| {framework} | {backend} | {programs} | {c['mismatch']} | {c['crash']} | "
                     f"{c['skip']} | {c['ill-conditioned']} | {secs:.0f} |"
                     + (f" {c['eager']} |" if args.grad else ""))
    lines.append("")
    for framework, backend, c, _ in rows:
        for key, n in sorted(((k, v) for k, v in c.items() if k.startswith("sig:")),
                             key=lambda kv: -kv[1]):
            lines.append(f"{framework}/{backend}: {n} x {key[4:]}")
    lines.append(f"repros: {args.out}")
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
