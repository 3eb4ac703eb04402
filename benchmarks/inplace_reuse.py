"""In-place vs out-of-place elementwise ops on a fresh intermediate, per size: where the
buffer reuse of ``eager_dispatch.no_grad_program`` pays.

Each case times ``op(x * 1.5, ...)`` against ``op_(x * 1.5, ...)`` (the product is the
dead intermediate the compiled program would write into), interleaved, min of many
short samples, and prints in-place / out-of-place per op and size. One thread setting
per process (thread pools are sized at start-up):

    OMP_NUM_THREADS=2 python benchmarks/inplace_reuse.py --threads 2 --framework tensorplay
"""

from __future__ import annotations

import argparse
import logging
import sys
import timeit

log = logging.getLogger("inplace_reuse")
SIZES = ((32, 256), (128, 256), (256, 256), (1024, 64), (512, 256), (768, 256), (512, 512),
         (1024, 1024))
#: name -> (out-of-place, in-place), each f(a, row, full): ``row`` broadcasts, ``full``
#: has a's shape.
OPS = {
    "mul scalar": (lambda a, r, f: a.mul(2.0), lambda a, r, f: a.mul_(2.0)),
    "add scalar": (lambda a, r, f: a.add(0.5), lambda a, r, f: a.add_(0.5)),
    "sub scalar": (lambda a, r, f: a.sub(0.5), lambda a, r, f: a.sub_(0.5)),
    "div scalar": (lambda a, r, f: a.div(0.5), lambda a, r, f: a.div_(0.5)),
    "relu": (lambda a, r, f: a.relu(), lambda a, r, f: a.relu_()),
    "exp": (lambda a, r, f: a.exp(), lambda a, r, f: a.exp_()),
    "add same-shape": (lambda a, r, f: a + f, lambda a, r, f: a.add_(f)),
    "sub same-shape": (lambda a, r, f: a - f, lambda a, r, f: a.sub_(f)),
    "mul same-shape": (lambda a, r, f: a * f, lambda a, r, f: a.mul_(f)),
    "mul broadcast": (lambda a, r, f: a * r, lambda a, r, f: a.mul_(r)),
    "add broadcast": (lambda a, r, f: a + r, lambda a, r, f: a.add_(r)),
}


def ratio(out_of_place, in_place, args, rounds: int) -> float:
    """In-place / out-of-place seconds per call, each the minimum over interleaved rounds."""
    def fo():
        return out_of_place(args[0] * 1.5, *args[1:])

    def fi():
        return in_place(args[0] * 1.5, *args[1:])
    number = 1
    while timeit.timeit(fo, number=number) < 3e-4 and number < 4096:
        number *= 2
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, fn in enumerate((fo, fi)):
            best[i] = min(best[i], min(timeit.repeat(fn, number=number, repeat=10)) / number)
    return best[1] / best[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--framework", choices=("tensorplay", "torch"), default="tensorplay")
    parser.add_argument("--rounds", type=int, default=10)
    opts = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if opts.framework == "torch":
        import torch as fw
    else:
        import tensorplay as fw
    fw.set_num_threads(opts.threads)
    log.info("| %s, %d thread(s) | %s |", opts.framework, opts.threads, " | ".join(OPS))
    log.info("|---|%s", "---|" * len(OPS))
    for rows, cols in SIZES:
        args = (fw.randn(rows, cols).abs() + 0.5, fw.randn(cols), fw.randn(rows, cols))
        cells = [f"{ratio(o, i, args, opts.rounds):.2f}" for o, i in OPS.values()]
        log.info("| %dx%d (%dK) | %s |", rows, cols, rows * cols // 1024, " | ".join(cells))


if __name__ == "__main__":
    main()
