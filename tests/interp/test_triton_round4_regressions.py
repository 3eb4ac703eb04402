"""Triton regressions found with issue 13's round 4 (tests/fuzz/FINDINGS.md, branch fz8),
interpreter, ``TPG_STRICT_LOWERING`` (a claimed region that fails to run fails the test).

TensorPlay programs, compared with TensorPlay's own eager results.
"""

import numpy as np
import pytest

T = pytest.importorskip("tensorplay")
pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TPG_STRICT_LOWERING", "1")


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
def test_tensorplay_integer_clamp_with_number_bounds_matches_eager(dtype):
    # TensorPlay casts number bounds to the input's dtype first: `T.clamp(x, -1.5, 2.5) * 2`
    # of int64 [3, -4] is [4, -2]; the kernel compared with -1.5 / 2.5 in float32 and gave
    # [5, -3] (bool: clamp(False, -1.5, 2.5) is True, the kernel kept False).
    x = T.from_numpy(np.array([[0, 3, -4, 1, 2]], dtype=np.float32)).to(getattr(T, dtype))

    def program(x):
        return (T.clamp(x, -1.5, 2.5) * 2, x.clamp(min=-1.0, max=2.0).sum(dim=-1, keepdim=True),
                x.clamp(max=2.5) + 1, x.clamp(min=0, max=1) * 3)

    want = program(x)
    got = tpg.compile(program, backend="triton")(x)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    declined = tpg.explain(program, x, backend=["triton"]).declined
    assert any("casts number bounds" in str(reason) for reason in declined.values())
