"""The model zoo on the CPU: every model x entry point x mode x backend, as a markdown table.

    python benchmarks/models_cpu.py                       # all cells, table on stdout
    python benchmarks/models_cpu.py -o zoo.md --models gpt2 tp_mlp --backends reference
    python benchmarks/models_cpu.py --zoo wide --backends auto reference   # 26 more architectures

Each cell compiles one zoo model (tests/models/zoo.py) and compares it with eager, as the
tests do (tests/models/harness.py): ``ok`` or the error class, the max abs error over outputs
(and gradients in grad mode), generated kernels in the lowered graph (tensorplay_graph.compile,
no_grad mode only), Dynamo graph breaks (torch.compile only) and the first compiled call's
CPU seconds (capture + lowering + run; process time with one torch thread, so that a busy
machine does not inflate it). Cells run in one process; Dynamo's cache is reset before each
torch.compile cell.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TILELANG_CACHE_DIR", str(ROOT / ".cache" / "tilelang"))
os.environ.setdefault("TPG_CACHE_DIR", str(ROOT / ".cache" / "tpg"))

from models.harness import run_cell  # noqa: E402
from models.zoo import CPU_BACKENDS, ENTRY_POINTS, MODES, ZOOS, zoo_named  # noqa: E402

logger = logging.getLogger("benchmarks.models_cpu")


def _kernels(result) -> str:
    """Generated-kernel calls in the lowered graph, where observable (tensorplay_graph.compile,
    no_grad: grad mode runs the captured graph through eager autograd)."""
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interp"))
        from triton_regions import lowered_summary  # a test fixture, not shipped
        return f", {len(lowered_summary(result.compiled)['kernels'])} kernels"
    except Exception:  # noqa: BLE001 - not a tensorplay_graph.compile result, or never lowered
        return ""


def _cell(result) -> str:
    if result.skipped:
        return "skipped"
    if result.error is None:
        text = f"ok {result.max_error:.1e}" + _kernels(result)
        if result.rounding:
            text += f" ({len(result.rounding)} within float32 rounding)"
    else:
        text = type(result.error).__name__
    if result.graph_breaks:
        text += f", {result.graph_breaks} breaks"
    if result.first_call_cpu_s is not None:
        text += f", {result.first_call_cpu_s:.2f}s"
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="zoo names (default: all)")
    parser.add_argument("--backends", nargs="*", default=list(CPU_BACKENDS))
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("-o", "--output", help="also write the markdown table here")
    parser.add_argument("--errors", action="store_true", help="list each failing cell's message")
    parser.add_argument("--zoo", choices=ZOOS, default="main",
                        help="wide: tests/models/zoo_wide.py; vision: tests/models/zoo_vision.py")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("tensorplay_graph").setLevel(logging.ERROR)  # the cells speak for themselves
    import torch
    torch.set_num_threads(1)

    specs = [s for s in zoo_named(ns.zoo) if not ns.models or s.name in ns.models]
    columns = [(m, b) for m in ns.modes for b in ns.backends]
    lines = ["| model | entry | " + " | ".join(f"{m} / {b}" for m, b in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    failures = []
    for spec in specs:
        for entry in ENTRY_POINTS[spec.framework]:
            cells = []
            for mode, backend in columns:
                result = run_cell(spec, entry, mode, backend)
                cells.append(_cell(result))
                logger.info("%s / %s / %s / %s: %s", spec.name, entry, mode, backend, cells[-1])
                if result.skipped:
                    failures.append(f"{spec.name} / {entry} / {mode}: skipped: {result.skipped}")
                if result.error is not None:
                    first_line = (str(result.error).splitlines() or [""])[0][:300]
                    failures.append(f"{spec.name} / {entry} / {mode} / {backend}: "
                                    f"{type(result.error).__name__}: {first_line}")
            lines.append(f"| {spec.name} | {entry} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    if ns.errors and failures:
        table += "\nFailing and skipped cells:\n\n" + "\n".join(f"- {f}" for f in failures) + "\n"
    sys.stdout.write(table)
    if ns.output:
        Path(ns.output).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
