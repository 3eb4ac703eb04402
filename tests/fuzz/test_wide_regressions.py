"""Regression tests for what the wide fuzz generator (fuzz_gen_more / fuzz_gen_shapes) found.

Each test is a shrunk fuzz program, compiled and compared with the framework's own eager
result (tests/fuzz/FINDINGS.md, section "Wide generator").
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_graph as tpg

BACKENDS = ["reference", "interpreter", "auto"]


def _same(want, got) -> None:
    assert type(got) is type(want) or hasattr(want, "dtype")
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for w, g in zip(want, got):
        assert str(g.dtype) == str(w.dtype) and tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(np.asarray(g.float().numpy() if "float" in str(w.dtype)
                                                 else g.numpy()),
                                      np.asarray(w.float().numpy() if "float" in str(w.dtype)
                                                 else w.numpy()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensorplay_einsum_is_captured_with_its_native_arguments(backend):
    # Seed 2 (TensorPlay / reference): `T.einsum('i,j->ij', a, b)` crashed at capture with
    # "einsum() got an unexpected keyword argument 'equation'": the Python wrapper was replayed
    # with the native call's keyword arguments.
    T = pytest.importorskip("tensorplay")
    a = T.from_numpy(np.arange(3, dtype=np.float32))
    b = T.from_numpy(np.array([1.5, -2.0], dtype=np.float32))

    def program(x, y):
        return (T.einsum("i,j->ij", x, y), T.einsum("i,i->", x, x))

    _same(program(a, b), tpg.compile(program, backend=backend)(a, b))
