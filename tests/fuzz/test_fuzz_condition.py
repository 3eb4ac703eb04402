"""The checker's ill-conditioning test: skips eager's own rounding sensitivity, never a bug."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fuzz_check import check, to_numpy  # noqa: E402
from fuzz_condition import eager_moves, ill_conditioned  # noqa: E402
from fuzz_program import InputSpec, Program, Stmt  # noqa: E402
from tensorplay_graph import prims  # noqa: E402


def test_log_of_a_sum_that_cancels_to_zero_is_ill_conditioned():
    # FINDINGS (seed 2014507): log(mean) where the mean is 0 up to rounding: eager -inf,
    # a correct compiled program NaN (its sum came out -1 ulp).
    def fn(x):
        return (torch.log(x[0] + x[1]),)

    def inputs():
        return [torch.tensor([1.2345678, -1.2345678])]

    want = fn(*inputs())
    got = (torch.tensor(float("nan")),)
    bad = [np.ones((), bool)]
    why = eager_moves(lambda: (fn, inputs), np.random.default_rng(0), want, got, bad, to_numpy)
    assert why is not None and why.startswith("ill-conditioned")


def test_a_wrong_value_on_a_cancelling_program_is_still_a_mismatch():
    # Same ill-conditioned program, but the compiled value is far beyond where eager moves.
    def fn(x):
        return (x[0] + x[1] + 10.0,)

    def inputs():
        return [torch.tensor([1.2345678, -1.2345678])]

    got = (torch.tensor(10.5),)
    assert eager_moves(lambda: (fn, inputs), np.random.default_rng(0), fn(*inputs()), got,
                       [np.ones((), bool)], to_numpy) is None


def test_a_sum_that_is_zero_by_summation_order_is_ill_conditioned():
    # Seed 6000649 (Triton): `x ** (1e-3 * x).sum()` on int32 x summing to 0. Eager's float32
    # sum is 0.0 by its order (x ** 0 = 1), a kernel's -4.7e-10 (NaN for x < 0, inf at 0).
    # No input can move (int32); the inexact literal 1e-3 can.
    program = Program("torch", [InputSpec("x0", (1, 8), "int32", 8159494)], [
        Stmt("v0", "(1e-3 * {0})", ("x0",), "arith"),
        Stmt("v1", "{0}.sum()", ("v0",), "reduce"),
        Stmt("v2", "({0} ** {1})", ("x0", "v1"), "arith")], ["v2"])
    from fuzz_program import build_function
    fn, inputs = build_function(program)
    want = fn(*inputs())
    x = inputs()[0]
    assert int(x.sum()) == 0 and float(want[0].sum()) == x.numel()  # every x ** 0.0 is 1
    got = (x ** torch.tensor(-4.656612873077393e-10),)
    bad = [~np.isclose(to_numpy(want[0]), to_numpy(got[0]))]
    assert bad[0].any()
    why = ill_conditioned(program, want, got, bad, to_numpy)
    assert why is not None and why.startswith("ill-conditioned")


def _program(stmt: Stmt, special: bool) -> Program:
    # x0: (4, 8) float32; ``special`` mixes in NaN / +-inf / +-0.0 / 1.0 (make_input: seed
    # 1236 holds three 1.0).
    return Program("torch", [InputSpec("x0", (4, 8), "float32", 1236, special)], [stmt], ["v0"])


@pytest.mark.parametrize("prim, broken, stmt, special", [
    # a lowering off by 1e-3 relative: inputs' ulps move eager by 1e-7
    ("mul", "({a} * {b} * 1.001)", Stmt("v0", "({0} * 3.0)", ("x0",), "arith"), False),
    # >= lowered as >: differs only at exact ties (x == 1.0), which are never perturbed
    ("ge", "({a} > {b})", Stmt("v0", "({0} >= 1.0)", ("x0",), "exact"), True),
])
def test_a_deliberately_broken_lowering_is_still_reported(monkeypatch, prim, broken, stmt, special):
    program = _program(stmt, special)
    assert check(program, "reference").status == "ok"
    monkeypatch.setitem(prims.get(prim).lowerings, "reference", broken)
    outcome = check(program, "reference")
    assert outcome.status == "mismatch", outcome
