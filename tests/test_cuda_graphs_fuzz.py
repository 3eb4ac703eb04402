"""Random programs replayed by CUDA graphs: the fuzzer's programs called four times each (compile,
record, replay, replay) with fresh inputs, through the CPU stand-in for CUDA graphs of
``test_cuda_graphs.py``. Every call must equal eager, leave the inputs as eager leaves them,
and keep earlier calls' results unchanged (``fuzz_check.check``). It found writes into an
input through a view of it that a replay dropped (GPU fuzz seeds 101000002, 101000201,
101000219): those seeds are in the set.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fuzz"))

from fuzz_check import check, run_and_report  # noqa: E402
from fuzz_gen import generate  # noqa: E402
from test_cuda_graphs import CpuGraphs, plan_on_cpu  # noqa: E402

SEEDS = [101000002, 101000031, 101000055, 101000161, 101000201, 101000219] + \
    list(range(101200000, 101200120))


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_random_programs_replayed_by_cuda_graphs_equal_eager(monkeypatch, backend):
    plan_on_cpu(monkeypatch, CpuGraphs)
    programs = [generate(seed, "torch") for seed in SEEDS]
    run_and_report(f"torch/{backend} (CUDA graphs, CPU stand-in)", programs, backend,
                   shrink_s=5.0, shrink_total_s=8.0,
                   checker=lambda p: check(p, backend, calls=4))
