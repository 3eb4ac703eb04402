"""TileLang C target: no float algebra that eager would not do (fuzz finding 18).

TVM's arith simplifier rewrites float expressions like integer ones: ``x - x`` and
``0 * x`` fold to 0, ``(a + c) - c`` to ``a``, ``x + 0`` to ``x`` -- eager gives NaN for
inf / NaN operands, inf on overflow and ``0.0`` for ``-0.0 + 0``. Each pattern below is
compiled whole (nothing declined, nothing left to eager) and compared with the framework's
own eager result on special values, sign of zero included.
"""

import math
import re
import os
import tempfile

import pytest

os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))

tilelang = pytest.importorskip("tilelang")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.tilelang.pointwise import (  # noqa: E402
    PointwiseDesc, PwInput, PwOutput, PwStep, compile_pointwise)

SPECIAL = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 0.5, -2.5, 1.0, 3e38, -3e38,
           1e-45, 2.0]
N = 8192  # 12 values x 8192 = 98304 elements: enough for the CPU claim


def patterns(x, y, where):
    """One region; each output is a pattern TIR folded (eager's value in the comment)."""
    self_sub = (x * 2) - (x * 2) + y             # CSE'd to v - v: NaN for inf x
    reassoc = (y * 3e38 + 3e38) - 3e38           # inf for y = 0.5 (folded: 1.5e38)
    zero_mul = 0 * x + y * 2                     # NaN for inf / NaN x
    zero_div = 0 / (x * y) + x                   # NaN for x * y = 0
    zero_div_bool = 0 / (x < 1.5) + x            # fuzz torch/tilelang seed 30: 0 / False
    self_div = (x * 2) / (x * 2) + y             # NaN for x = 0, inf
    add_zero = (x * 2 + 0) * y                   # -0.0 + 0 is 0.0 (folded: -0.0)
    zero_sub = (0 - x * 2) * y                   # 0 - 0.0 is 0.0 (folded: -0.0)
    self_eq = where((x * 3) == (x * 3), x, y) + 1  # NaN == NaN is False
    return self_sub, reassoc, zero_mul, zero_div, zero_div_bool, self_div, add_zero, zero_sub, self_eq


def _torch_inputs():
    x = torch.tensor(SPECIAL).repeat(N)
    return x, x.roll(5)


def _assert_bitwise_equal(got, want, name):
    """Equal values, NaN where eager has NaN, and the same sign of every zero."""
    got, want = got.tolist(), want.tolist()
    assert len(got) == len(want), name
    for k, (g, w) in enumerate(zip(got, want)):
        same = (math.isnan(g) and math.isnan(w)) or (g == w and math.copysign(1, g) == math.copysign(1, w))
        assert same, f"{name}[{k}]: compiled {g!r}, eager {w!r}"


def _check(fn, args, to_torch):
    e = tpg.explain(fn, *args, backend="tilelang", compile_kernels=False)
    assert not e.declined, e.declined  # every pattern is claimed, not left to eager
    got, want = tpg.compile(fn, backend="tilelang")(*args), fn(*args)
    names = patterns.__code__.co_varnames[3:3 + len(want)]
    for g, w, name in zip(got, want, names):
        _assert_bitwise_equal(to_torch(g), to_torch(w), name)


def test_torch_patterns_are_compiled_as_eager_computes_them(monkeypatch):
    monkeypatch.setenv("TPG_STRICT_LOWERING", "1")
    _check(lambda x, y: patterns(x, y, torch.where), _torch_inputs(), lambda t: t)


def test_tensorplay_patterns_are_compiled_as_eager_computes_them(monkeypatch):
    tp = pytest.importorskip("tensorplay")
    monkeypatch.setenv("TPG_STRICT_LOWERING", "1")
    x, y = (tp.from_dlpack(t.clone()) for t in _torch_inputs())
    _check(lambda x, y: patterns(x, y, tp.where), (x, y), torch.from_dlpack)


def test_generated_c_keeps_operands_opaque_and_slots_private():
    """The C of ``(x - x) * 0.0``: a subtraction of two variables, a multiplication by a
    variable (no literal the simplifier could fold), slot buffers private to each thread."""
    desc = PointwiseDesc((65536,), (PwInput("x", (65536,), "float32"),),
                         (PwStep("s", "(a0_0 - a0_1)", operands=(("a0_0", "x", False), ("a0_1", "x", False))),
                          PwStep("t", "(a1_0 * a1_1)", operands=(("a1_0", "s", False), ("a1_1", "0.0", True)))),
                         (PwOutput("t", "float32"),))
    kernel = compile_pointwise(desc, "c")
    assert "(a0_0 - a0_1)" in kernel.c_source and "(a1_0 * a1_1)" in kernel.c_source
    assert re.search(r"#pragma omp parallel for private\((sf, sc|sc, sf)\)", kernel.c_source)
    x = torch.tensor(SPECIAL).repeat(N // 2 * 3)[:65536]
    _assert_bitwise_equal(kernel(x)[0], (x - x) * 0.0, "(x - x) * 0.0")
