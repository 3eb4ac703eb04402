"""GPU check: Triton ``maximum`` / ``minimum`` keep CUDA eager's operand on a 0.0 / -0.0 tie.

The Triton backend's GPU kernels use ``tl.minimum`` / ``tl.maximum`` (hardware min / max),
assumed to pick as CUDA eager's ``::min`` / ``::max`` do (prims/extremum_ties.py); on the CPU
only the interpreter is tested. This measures it on the H200:

    python benchmarks/gpu_extremum_ties.py

Prints one line per dtype x size (``ok`` or the mismatching count of ``1 / result``) and
exits 1 on any mismatch.
"""

from __future__ import annotations

import logging
import sys

import torch

import tensorplay_graph as tpg

log = logging.getLogger("gpu_extremum_ties")


def program(a, b, c):
    return (1 / torch.minimum(b, a), 1 / torch.minimum(a, b), 1 / torch.maximum(b, a),
            1 / torch.maximum(a, b), 1 / torch.minimum(c, a), 1 / torch.maximum(c, b))


def check(n: int, dtype: torch.dtype) -> int:
    """Elements whose ``1 / result`` differs from eager's (inf signs), over all outputs."""
    zero = torch.zeros(n, device="cuda", dtype=dtype)
    mixed = torch.where(torch.arange(n, device="cuda") % 3 == 0, -zero, zero)
    args = (zero, -zero, mixed)
    got = tpg.compile(program, backend="triton")(*args)
    want = program(*args)
    return sum(int((g.float() != w.float()).sum()) for g, w in zip(got, want))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    bad = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (4, 15, 16, 17, 40, 1000, 65539):
            wrong = check(n, dtype)
            bad += wrong
            log.info("%s n=%d: %s", str(dtype).split(".")[-1], n,
                     "ok" if not wrong else f"{wrong} elements differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
