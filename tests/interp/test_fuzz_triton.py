"""Differential fuzzing of the Triton backend in Triton's interpreter (torch programs only).

The same generator and checker as tests/fuzz/test_fuzz.py, small shapes (the
interpreter runs per program instance). TPG_FUZZ_TRITON_N raises the count.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

from fuzz_check import run_and_report  # noqa: E402
from fuzz_gen import generate  # noqa: E402

BUDGET = 40
SHRINK_S, SHRINK_TOTAL_S = 5.0, 8.0


def test_triton_compiled_equals_eager_on_random_programs():
    n = int(os.environ.get("TPG_FUZZ_TRITON_N", BUDGET))
    start = int(os.environ.get("TPG_FUZZ_SEED", 0))
    programs = [generate(seed, "torch") for seed in range(start, start + n)]
    run_and_report("torch/triton", programs, "triton", SHRINK_S, SHRINK_TOTAL_S)
