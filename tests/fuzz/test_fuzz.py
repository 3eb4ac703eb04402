"""Differential fuzzing: random straight-line programs, compiled == eager, on every CPU backend.

A fixed seed set per framework x backend (TPG_FUZZ_N=20000 for a long run; or
``python benchmarks/fuzz.py``). Each failure is shrunk to a minimal self-contained
repro, and the assertion message lists them. Triton runs in tests/interp/test_fuzz_triton.py.
"""

from __future__ import annotations

import os

import pytest

from fuzz_check import run_and_report
from fuzz_gen import generate

#: Programs per cell in CI (cold TileLang compiles cost seconds each: it gets fewer).
BUDGET = {"reference": 100, "interpreter": 60, "auto": 60, "tilelang": 40}
#: Every k-th program of these backends uses 64Ki+ element float32 tensors (TileLang's CPU range).
BIG_EVERY = {"auto": 30, "tilelang": 10}
#: Shrinking budget per failure and per cell, so a red run still ends in CI time.
SHRINK_S, SHRINK_TOTAL_S = 5.0, 8.0


def frameworks():
    out = []
    for name in ("torch", "tensorplay"):
        try:
            __import__(name)
            out.append(name)
        except ImportError:
            pass
    return out


def fuzz_cell(framework: str, backend: str) -> None:
    n = int(os.environ.get("TPG_FUZZ_N", BUDGET[backend]))
    start = int(os.environ.get("TPG_FUZZ_SEED", 0))
    every = BIG_EVERY.get(backend, 0)
    programs = [generate(seed, framework, big=bool(every) and seed % every == 0)
                for seed in range(start, start + n)]
    run_and_report(f"{framework}/{backend}", programs, backend, SHRINK_S, SHRINK_TOTAL_S)


@pytest.mark.parametrize("framework", frameworks())
@pytest.mark.parametrize("backend", ["reference", "interpreter", "auto", "tilelang"])
def test_compiled_equals_eager_on_random_programs(framework, backend):
    if backend == "tilelang":
        pytest.importorskip("tilelang")
    fuzz_cell(framework, backend)


def test_generator_is_deterministic_and_covers_the_op_families():
    # the base families (the wide ones: tests/fuzz/test_fuzz_gen_more.py)
    sources = [generate(seed, "torch", wide=False).body() for seed in range(40)]
    assert sources[:8] == [generate(seed, "torch", wide=False).body() for seed in range(8)]
    text = "\n".join(sources)
    for needle in ("T.where(", ".sum(dim=", "softmax", "layer_norm", "@", ".transpose(", "_(",
                   "fuzz_affine(", ".to(T.", ".permute(", "float(\"inf\")"):
        assert needle in text, f"no generated program uses {needle!r}"


def test_a_program_whose_eager_result_changes_between_calls_is_skipped_not_compared():
    import torch
    from fuzz_check import _eager_unstable

    calls = iter(range(100))

    def flaky(x):
        return (x + next(calls),)

    def steady(x):
        return (x + 1,)

    x = torch.zeros(3)
    want = flaky(x)
    why = _eager_unstable(flaky, lambda: (x,), want, [0], False)
    assert why is not None and "not deterministic" in why
    assert _eager_unstable(steady, lambda: (x,), steady(x), [0], False) is None


def test_tensorplay_programs_never_write_in_place_through_an_expand():
    # Seed 2003586 (narrow generator) wrote `v6 = v4.expand(2, 5, 5); v6.zero_()` (op_repeat's in-place follow-up):
    # TensorPlay 1.0.0 eager writes past the storage and the process aborts at exit.
    import subprocess
    import sys
    code = ("import sys; sys.path.insert(0, 'tests/fuzz'); from fuzz_gen import generate; "
            "from fuzz_program import build_function; "
            "p = generate(2003586, 'tensorplay', wide=False); "
            "fn, inputs = build_function(p); [fn(*inputs()) for _ in range(3)]; "
            "print([s.code for s in p.stmts])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, out.stderr[-500:]
    assert "expand" in out.stdout  # the program still has the expand, without the write


def test_tensorplay_programs_never_cast_a_nan_tensorplay_would_lose_to_bfloat16():
    # Seed 2017613: TensorPlay 1.0.0's float32 -> bfloat16 cast rounds the bits without a NaN
    # check; the all-ones NaNs of its vectorised sin(inf) became 0.0 (FINDINGS.md item 4).
    T = pytest.importorskip("tensorplay")
    import numpy as np
    from fuzz_avoid import loses_nan_to_bfloat16
    from fuzz_check import check

    # Which elements lose their NaN depends on the CPU's vector width (the cast's vector and
    # scalar paths differ): NaNs with all-ones mantissas are lost on the machines seen here.
    ones = T.from_numpy(np.full((40,), 0xFFFFFFFF, dtype=np.uint32).view(np.float32))
    assert loses_nan_to_bfloat16(T, "x.bfloat16()", {"T": T, "x": ones}, ones.bfloat16())
    plain = T.from_numpy(np.full((40,), np.nan, dtype=np.float32))
    assert not loses_nan_to_bfloat16(T, "x.bfloat16()", {"T": T, "x": plain}, plain.bfloat16())
    x = T.from_numpy(np.full((40,), np.inf, dtype=np.float32))
    value = T.sin(x).bfloat16()
    lost = bool((~np.isnan(np.asarray(value.float().numpy()))).any())  # sin(inf) is NaN
    assert loses_nan_to_bfloat16(T, "T.sin(x).bfloat16()", {"T": T, "x": x}, value) == lost
    program = generate(2017613, "tensorplay")
    assert check(program, "reference").status == "ok"


def test_tensorplay_programs_never_use_a_tensor_tensorplay_mislabels_contiguous():
    # Seed 6000825: TensorPlay 1.0.0's round() of a transposed int32 tensor keeps the
    # transposed strides but reports is_contiguous(); `v1 == v4` of two such tensors then
    # compared memory order as logical order (eager's answer transposed; compiled was right).
    T = pytest.importorskip("tensorplay")
    import numpy as np
    from fuzz_avoid import mislabelled_contiguous
    from fuzz_check import check

    x = T.from_numpy(np.arange(50, dtype=np.int32).reshape(5, 5, 2)).transpose(-1, -2)
    assert mislabelled_contiguous(T.round(x)) and not mislabelled_contiguous(x)
    assert not mislabelled_contiguous(T.round(x.contiguous()))
    assert check(generate(6000825, "tensorplay"), "reference").status == "ok"
