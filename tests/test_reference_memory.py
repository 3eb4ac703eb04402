"""The reference backend's peak memory: intermediates are freed after their last use.

tracemalloc sees every NumPy allocation (the reference kernels allocate nothing else;
inputs are the framework's own memory, which it does not see). The bound is analytic:
eager, freeing each value after its last use, must hold at most three arrays of the
input's size at once in this program (``a`` lives to the end, plus one operand and one
result); a kernel that keeps every intermediate to its end holds all thirteen.
"""

import tracemalloc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg

FRAMEWORKS = {"torch": torch, "tensorplay": tp}


def program(x):
    a = (x * 1.5 + 0.25).exp()
    b = ((a - 1.0) * 0.5).tanh()
    c = (b * b + 2.0).sqrt()
    return (c * 3.0 - a).abs() / 2.0


def _peak_bytes(fn, *args):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn(*args)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fw_name", sorted(FRAMEWORKS))
def test_chain_peak_stays_near_eagers_live_set(fw_name):
    fw = FRAMEWORKS[fw_name]
    x = fw.randn(512, 1024)  # 2 MiB of float32
    compiled = tpg.compile(program, backend="reference")
    compiled(x)  # capture and lower outside the measurement
    lowered = next(iter(compiled.specializations.values())).lowered
    assert any("kernel" in n.meta for n in lowered.graph.nodes), "the program did not lower"
    out, peak = _peak_bytes(compiled, x)
    np.testing.assert_allclose(out.numpy(), program(x).numpy(), rtol=1e-5, atol=1e-6)
    array = 512 * 1024 * 4
    eager_live = 3 * array  # a, one operand, one result (see the module docstring)
    assert peak <= 1.3 * eager_live, (
        f"reference kernel peak {peak / array:.1f} arrays, eager's live set "
        f"{eager_live / array:.0f}")
