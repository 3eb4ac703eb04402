"""Triton regressions of fuzz seed range 20001849+ (tests/fuzz/FINDINGS.md, issue 13),
interpreter, ``TPG_STRICT_LOWERING`` (a claimed region that fails to run fails the test).

Each program is compared with torch eager bitwise (inf signs included), NaN for NaN.
"""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TPG_STRICT_LOWERING", "1")


def compiled_equals_eager(program, *args):
    """Why triton declined each node it declined (``explain``), after comparing with eager."""
    gm = compile_graph(tpg.capture(program, *args), args, backends=["triton"])
    got, want = gm(*[a.clone() for a in args]), program(*[a.clone() for a in args])
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    return tpg.explain(program, *args, backend=["triton"]).declined


@pytest.mark.parametrize("n, claimed", [(4, True), (15, True), (40, False)])
def test_minimum_maximum_tie_keeps_cpu_eagers_operand(n, claimed):
    # seed 20001849: `x4 / T.minimum(x1, v6)` with x1 = -0.0 and v6 = 0.0: CPU eager's
    # scalar loop keeps the first operand (inf), the interpreter's tl.minimum the second
    # (-inf). Results of 16+ float32 elements reach eager's vectorised loop, whose pick
    # depends on the layout: declined.
    zero = torch.zeros(n)
    neg = -zero
    mixed = torch.where(torch.arange(n) % 3 == 0, neg, zero)

    def program(a, b, c):
        return (1 / torch.minimum(b, a), 1 / torch.maximum(b, a), 1 / torch.minimum(a, c),
                1 / torch.maximum(c, b), torch.minimum(c, torch.full((), float("nan"))))

    declined = compiled_equals_eager(program, zero, neg, mixed)
    assert ("minimum" not in declined) == claimed, declined
