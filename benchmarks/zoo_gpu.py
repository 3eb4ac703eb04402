"""The torch model zoo on a CUDA device: every model x entry point x mode, compiled == eager.

    source benchmarks/gpu_setup.sh   # on the GPU machine, after carrying .gpu
    python benchmarks/zoo_gpu.py [--models gpt2 bert] [--entries tpg dynamo] [--out DIR]
    python benchmarks/zoo_gpu.py --zoo wide    # tests/models/zoo_wide.py: 26 more architectures
    python benchmarks/zoo_gpu.py --zoo vision  # tests/models/zoo_vision.py: torchvision, timm

``benchmarks/models_cpu.py``'s cells (tests/models/harness.py: outputs, then gradients and an
output after one SGD step, against the model's own eager run) with the model and its inputs on
``cuda`` in float32 and the default backend choice, so generated Triton kernels, CUDA graphs
and the GPU-only rewrites run for real. cuDNN's TF32 convolutions are off unless ``--tf32``
(both sides would carry TF32 rounding, which hides or fakes a difference). Tolerances:
``harness.GPU_RTOL`` / ``GPU_ATOL`` (summation order differs from eager's); a value past them
is still ok when it is as close to a float64 run as eager's own float32 (``models/rounding.py``;
the row lists it under ``float32_rounding``). One JSON line per cell, then a summary; exit
status 1 when a cell fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from models.harness import run_cell  # noqa: E402
from models.zoo import MODES, ZOOS, zoo_named  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="zoo names (default: every torch model)")
    parser.add_argument("--entries", nargs="*", default=["tpg", "dynamo"])
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--budget-s", type=float, default=1e9,
                        help="stop starting cells after this many seconds")
    parser.add_argument("--out", help="also write zoo_gpu.json here")
    parser.add_argument("--zoo", choices=ZOOS, default="main",
                        help="wide: tests/models/zoo_wide.py; vision: tests/models/zoo_vision.py")
    parser.add_argument("--tf32", action="store_true",
                        help="leave cuDNN's TF32 convolutions on (torch's default): eager and "
                             "compiled then differ by TF32 rounding where cuDNN picks another "
                             "algorithm (a channels_last convolution)")
    ns = parser.parse_args(argv)
    import torch
    torch.backends.cudnn.allow_tf32 = ns.tf32
    specs = [s for s in zoo_named(ns.zoo)
             if s.framework == "torch" and (not ns.models or s.name in ns.models)]
    unknown = set(ns.models or ()) - {s.name for s in specs}
    if unknown:
        parser.error(f"not torch zoo models: {sorted(unknown)}")
    rows, begin = [], time.perf_counter()
    for spec in specs:
        for entry in ns.entries:
            for mode in ns.modes:
                if time.perf_counter() - begin > ns.budget_s:
                    break
                result = run_cell(spec, entry, mode, ns.backend, device="cuda")
                row = {"model": spec.name, "entry": entry, "mode": mode, "status": result.status,
                       "max_error": result.max_error, "first_call_s": result.first_call_s}
                if result.skipped:
                    row["skipped"] = result.skipped
                if result.rounding:
                    row["float32_rounding"] = result.rounding
                if result.error is not None:
                    row["error"] = f"{type(result.error).__name__}: {result.error}"[:600]
                rows.append(row)
                print(json.dumps(row), flush=True)
    failed = [r for r in rows if r["status"] not in ("ok", "skipped")]
    skipped = sum(r["status"] == "skipped" for r in rows)
    summary = {"cells": len(rows), "ok": len(rows) - len(failed) - skipped, "failed": len(failed),
               "skipped": skipped,
               "seconds": round(time.perf_counter() - begin, 1)}
    print(json.dumps(summary), flush=True)
    if ns.out:
        os.makedirs(ns.out, exist_ok=True)
        report = {"summary": summary, "cells": rows}
        Path(ns.out, "zoo_gpu.json").write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
