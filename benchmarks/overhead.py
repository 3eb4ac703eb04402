"""Per-call overhead of a captured program vs eager, on small tensors.

A 5-op TensorPlay program on 16x16 tensors is run three ways: eager, as our
captured GraphModule, and as TensorPlay's own ``tensorplay.graph``
GraphModule (``symbolic_trace``). Small tensors make the per-call Python
overhead dominate, which is what a GraphModule adds. Target: ours <= 1.15x
eager. Each figure is the minimum over rounds of the median over samples
(the three candidates are interleaved in every round, so drift hits all).

If ``benchmarks/overhead_ops.py`` exists (custom-op call overhead), its
``measure()`` rows are printed too.

    python benchmarks/overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import timeit
from typing import Callable, Dict, List, Tuple

import tensorplay as tp


def program(x, y):
    """Five ops: a functional call, Python operators and a Tensor method."""
    a = x + y
    b = a * 2.0
    c = tp.relu(b)
    d = c.exp()
    return d - x


def candidates() -> Tuple[Dict[str, Callable], tuple]:
    """The callables to time, all computing ``program`` on the same inputs."""
    import tensorplay.graph as tp_graph

    import tensorplay_graph as tpg

    x, y = tp.randn(16, 16), tp.randn(16, 16)
    ours = tpg.capture(program, x, y)
    theirs = tp_graph.symbolic_trace(program)
    expected = program(x, y)
    for gm in (ours, theirs):
        assert (gm(x, y) - expected).abs().max().item() == 0.0
    return {"eager": program, "tensorplay_graph": ours, "tensorplay.graph": theirs}, (x, y)


def per_call_seconds(fns: Dict[str, Callable], args: tuple, rounds: int, samples: int,
                     number: int) -> Dict[str, float]:
    """min over ``rounds`` of the median over ``samples`` of the per-call time."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            timer = timeit.Timer(lambda fn=fn: fn(*args))
            median = statistics.median(timer.repeat(samples, number)) / number
            best[name] = min(best[name], median)
    return best


def op_overhead_rows() -> List[Tuple[str, float, float]]:
    """Rows of ``benchmarks/overhead_ops.py``'s ``measure()``, or [] if that file is absent."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "overhead_ops.py")
    if not os.path.exists(path):
        return []
    spec = importlib.util.spec_from_file_location("overhead_ops", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.measure()


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (smoke run)")
    parser.add_argument("--no-ops", action="store_true", help="skip the custom-op overhead rows")
    opts = parser.parse_args(argv)
    rounds, samples, number = (2, 5, 500) if opts.quick else (7, 15, 2000)

    fns, args = candidates()
    times = per_call_seconds(fns, args, rounds, samples, number)
    eager = times["eager"]
    print(f"5-op TensorPlay program, 16x16 float32, {platform.processor() or platform.machine()}, "
          f"Python {sys.version.split()[0]}")
    for name, seconds in times.items():
        print(f"  {name:18s} {seconds * 1e6:7.2f} us/call   {seconds / eager:5.2f}x eager")
    ratio = times["tensorplay_graph"] / eager
    print(f"  target <= 1.15x eager: {'met' if ratio <= 1.15 else 'MISSED'} ({ratio:.3f}x)")

    if not opts.no_ops:
        rows = op_overhead_rows()
        if rows:
            print("custom-op call overhead (benchmarks/overhead_ops.py):")
        for label, ours_s, anchor_s in rows:
            print(f"  {label:60s} ours {ours_s * 1e9:8.0f} ns  tensorplay {anchor_s * 1e9:8.0f} ns  "
                  f"ratio {ours_s / anchor_s:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
