"""A program that reads the grad mode (``capture/grad_mode.py``): the capture's branch must
not serve the other mode. Before, ``x * 2 if torch.is_grad_enabled() else x * 3`` compiled
with grad enabled returned ``x * 2`` under ``no_grad`` too."""

from __future__ import annotations

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def values(t):
    return np.asarray(t.tolist())


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
@pytest.mark.parametrize("first", ["grad", "no_grad"])
def test_a_branch_on_the_grad_mode_follows_the_mode_of_each_call(fw, first):
    lib = FRAMEWORKS[fw]

    def f(x):
        return x * 2.0 if lib.is_grad_enabled() else x * 3.0

    compiled = tpg.compile(f)
    x = lib.ones(3)
    modes = ["grad", "no_grad"] if first == "grad" else ["no_grad", "grad"]
    for mode in modes * 2:
        if mode == "no_grad":
            with lib.no_grad():
                got, want = compiled(x), f(x)
        else:
            got, want = compiled(x), f(x)
        np.testing.assert_allclose(values(got), values(want))
    assert compiled.captures == 2
    assert "grad mode" in compiled.explain()


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_a_program_that_does_not_read_the_mode_serves_both_from_one_capture(fw):
    lib = FRAMEWORKS[fw]
    model = lib.nn.Linear(4, 2)
    compiled = tpg.compile(model)
    x = lib.randn(3, 4)
    with lib.no_grad():
        np.testing.assert_allclose(values(compiled(x)), values(model(x)), rtol=1e-5)
    np.testing.assert_allclose(values(compiled(x).detach()), values(model(x).detach()), rtol=1e-5)
    assert compiled.captures == 1
