"""torch ``maximum`` / ``minimum`` on a 0.0 / -0.0 tie (tests/fuzz/FINDINGS.md, issue 13).

torch's CPU kernel keeps the first operand on a tie in its scalar loop and the second in its
vectorised loop (results of 16+ float32 elements); ``1 / result`` shows the pick as +-inf.
Each program is compared with torch eager, inf signs included.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_graph as tpg

T = pytest.importorskip("torch")


def _assert_same(want, got) -> None:
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        # inf vs -inf differ here; NaN equals NaN
        np.testing.assert_array_equal(g.double().numpy(), w.double().numpy())


def _ties(shape, dtype):
    """(zeros, negative zeros, mixed): every element of the first two a tie."""
    n = int(np.prod(shape))
    zero = T.zeros(shape, dtype=dtype)
    mixed = T.from_numpy(np.where(np.arange(n) % 3 == 0, -0.0, 0.0).astype(np.float32))
    return zero, -zero, mixed.reshape(shape).to(dtype)


@pytest.mark.parametrize("backend", ["reference", "auto"])
@pytest.mark.parametrize("shape, dtype", [((4,), T.float32), ((15,), T.float32),
                                          ((16,), T.float32), ((17,), T.float32),
                                          ((3, 7), T.float32), ((7,), T.float64),
                                          ((8,), T.float64), ((31,), T.float16),
                                          ((33,), T.bfloat16)])
def test_minimum_maximum_tie_keeps_eagers_operand(backend, shape, dtype):
    # seed 20001849 (torch / reference and triton): `x4 / T.minimum(x1, x0)` with x1 = -0.0,
    # x0 zeroed: eager -6 / -0.0 = inf (its scalar loop keeps the first operand), compiled
    # -inf (NumPy's minimum keeps the second).
    zero, negative, mixed = _ties(shape, dtype)

    def program(a, b, c):
        return (1 / T.minimum(b, a), 1 / T.minimum(a, b), 1 / T.maximum(b, a),
                1 / T.maximum(a, b), 1 / T.minimum(c, a), 1 / T.maximum(c, b))

    _assert_same(program(zero, negative, mixed),
                 tpg.compile(program, backend=backend)(zero, negative, mixed))


@pytest.mark.parametrize("backend", ["reference", "auto"])
def test_broadcast_minimum_of_a_zeroed_input(backend):
    # the shrunk repro of seed 20001849: a broadcast (1, 4) operand zeroed in place
    def inputs():
        x1 = T.tensor([[[-0.4, 0.5, -2.9, -0.0]], [[1.0, -2.4, -1.6, -0.5]]])
        return T.randn(1, 4), x1, T.tensor([5, 4, 4, -6])

    def program(x0, x1, x4):
        x0.zero_()
        return (x4 / T.minimum(x1, x0), x4 / T.maximum(x0, x1.neg()))

    _assert_same(program(*inputs()), tpg.compile(program, backend=backend)(*inputs()))
