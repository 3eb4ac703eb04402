"""TileLang C target on the CPU: run time of a fused chain, and what one kernel build costs.

    python benchmarks/tilelang_cpu.py                 # both parts
    python benchmarks/tilelang_cpu.py --part speed    # --part build

speed: the 8-cheap-op chain of benchmarks/RESULTS.md (mul, add, relu, mul, add, mul, sub,
clamp) on 16M float32 elements, TensorPlay and torch programs, ``backend="tilelang"`` vs the
framework's eager; median of --calls calls after one warm-up, compiled and eager interleaved.
``--cxx`` builds the kernels as C++ with TileLang's header (the pre-``cbuild`` way).

build: --kernels distinct kernels (a chain of 8 steps, constants varied) in a fresh cache:
TVMScript parse, TVM lowering and the compiler, each timed, for the plain-C and the C++ build.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List

log = logging.getLogger("tilelang_cpu")
N = 1 << 24


def chain(x, y):
    return ((((x * 0.5 + y).relu() * 2.0 + 1.0) * y - x).clamp(-1.0, 1.0))


def _median_ms(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def speed(calls: int) -> List[Dict[str, Any]]:
    import numpy as np
    import tensorplay as tp
    import torch

    import tensorplay_graph as tpg

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    rows = []
    for name, x, y in (("tensorplay", tp.from_numpy(a), tp.from_numpy(b)),
                       ("torch", torch.from_numpy(a), torch.from_numpy(b))):
        compiled = tpg.compile(chain, backend="tilelang")
        compiled(x, y)  # build + warm-up
        chain(x, y)
        got, eager = [], []
        for _ in range(calls):  # interleaved: a shared machine's load moves within seconds
            got.append(_median_ms(lambda: compiled(x, y), 1))
            eager.append(_median_ms(lambda: chain(x, y), 1))
        rows.append({"framework": name, "compiled_ms": statistics.median(got),
                     "eager_ms": statistics.median(eager)})
        log.info("%-10s tilelang %.1f ms   eager %.1f ms", name, rows[-1]["compiled_ms"],
                 rows[-1]["eager_ms"])
    return rows


def build(kernels: int) -> Dict[str, Dict[str, float]]:
    from tensorplay_graph.backends.tilelang import cache, cbuild
    from tensorplay_graph.backends.tilelang import pointwise as pw

    tilelang = cache.load_tilelang()
    include = os.path.join(os.path.dirname(tilelang.__file__), "src")
    out: Dict[str, Dict[str, float]] = {}
    plain_c = cbuild.plain_c
    for mode in ("plain C", "C++"):
        cbuild.plain_c = plain_c if mode == "plain C" else (lambda source: None)
        os.environ["TILELANG_CACHE_DIR"] = tempfile.mkdtemp(prefix="tpg-tl-build-")
        phases: Dict[str, List[float]] = {"parse": [], "lower": [], "compile": []}
        for k in range(kernels):
            steps = tuple(pw.PwStep(f"s{j}", f"(a{j}_0 * a{j}_1)", operands=(
                (f"a{j}_0", "x" if j == 0 else f"s{j - 1}", False),
                (f"a{j}_1", repr(1.0 + j + k / 100), True))) for j in range(8))
            desc = pw.PointwiseDesc((N,), (pw.PwInput("x", (N,), "float32"),), steps,
                                    (pw.PwOutput("s7", "float32"),))
            kernel = pw.PointwiseKernel(desc, "c")
            t0 = time.perf_counter()
            program = cache.load_program(kernel.source, kernel.key).main
            t1 = time.perf_counter()
            c_source = pw._parallelise(tilelang.lower(program, target="c").kernel_source)[0]
            t2 = time.perf_counter()
            cbuild.build(c_source, include)
            t3 = time.perf_counter()
            for phase, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
                phases[phase].append(seconds)
        out[mode] = {phase: statistics.median(v) for phase, v in phases.items()}
        log.info("%-8s parse %.2f s  lower %.2f s  compile %.2f s (median of %d)", mode,
                 *out[mode].values(), kernels)
    cbuild.plain_c = plain_c
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--part", choices=("speed", "build", "both"), default="both")
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--kernels", type=int, default=5)
    parser.add_argument("--cxx", action="store_true", help="speed: build kernels as C++")
    opts = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    log.info("%s, load average %.1f", time.strftime("%Y-%m-%d %H:%M"), os.getloadavg()[0])
    if opts.part in ("build", "both"):
        build(opts.kernels)
    if opts.part in ("speed", "both"):
        os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tl-speed-"))
        if opts.cxx:
            from tensorplay_graph.backends.tilelang import cbuild
            cbuild.plain_c = lambda source: None
        speed(opts.calls)


if __name__ == "__main__":
    main()
