"""Outputs the loss does not use: the compiled backward gives what eager autograd gives.

Eager runs no backward for an unused output: no term of it reaches any gradient (not even
``0 * inf = NaN``), and an input reached only through unused outputs keeps ``.grad`` None.
The compiled backward is specialized per set of unused outputs
(``training/dead_tangents.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_graph as tpg

OPTIONS = {"backends": ["reference"]}


def scaled(x, w, v):
    """``x * w`` with an infinite ``w``: its backward is ``g * w``, NaN for a zero ``g``."""
    return (x * 3.0).sum(), x * w, v.exp()


def pieces(x, w, v):
    """A ``split`` piece nobody uses: eager's engine gives it a zero gradient, so its rows
    of ``x.grad`` are ``0 * inf`` = NaN in eager too."""
    a, b = (x * w).split(2)
    return a.sum() + v.sum(), b * 2.0


def _inputs(fw):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = np.array([1.0, np.inf, -2.0], dtype=np.float32)
    v = rng.standard_normal(3).astype(np.float32)
    return [fw.mod.from_numpy(a).requires_grad_(True) for a in (x, w, v)]


def _step(fn, fw):
    args = _inputs(fw)
    outs = fn(*args)
    outs[0].backward()
    return [a.grad for a in args]


@pytest.mark.parametrize("program", [scaled, pieces])
def test_unused_outputs_add_nothing_to_the_gradients(fw, program):
    want = _step(program, fw)
    compiled = tpg.compile(program, options=OPTIONS)
    for call in range(3):
        got = _step(compiled, fw)
        for name, g, e in zip("xwv", got, want):
            assert (g is None) == (e is None), f"{name}.grad (call {call}): {g} vs {e}"
            if e is not None:
                np.testing.assert_array_equal(fw.numpy(g), fw.numpy(e),
                                              err_msg=f"{name}.grad (call {call})")
    assert "forward and backward compiled through our joint graph" in compiled.explain()
