"""Changing sizes: dynamic=True and automatic dynamic compile each new size lazily, past no limit."""

import logging

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.compiled import RecompileLimitError  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def program(x, w):
    return (x @ w).softmax(-1) * x.shape[1]


def dynamic_logs(caplog):
    return [r for r in caplog.records if "treating sizes as dynamic" in r.getMessage()]


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
@pytest.mark.parametrize("dynamic", [True, None])   # None: automatic after the first size change
def test_ten_sequence_lengths_stay_under_the_limit(fw, dynamic, caplog):
    lib = FRAMEWORKS[fw]
    caplog.set_level(logging.INFO, logger="tensorplay_graph.recompiles")
    compiled = tpg.compile(program, dynamic=dynamic, options={"recompile_limit": 2})
    w = lib.randn(8, 8)
    for n in range(3, 13):
        x = lib.randn(2, n, 8)
        np.testing.assert_allclose(compiled(x, w).numpy(), program(x, w).numpy(), rtol=1e-5, atol=1e-6)
    assert len(dynamic_logs(caplog)) == 1 and compiled.recompile_reasons == []
    compiled(lib.randn(2, 3, 8, dtype=lib.float64), w.to(lib.float64))  # a dtype change counts
    assert len(compiled.recompile_reasons) == 1
    with pytest.raises(RecompileLimitError):      # ... and so does a rank change: over the limit
        compiled(lib.randn(3, 8), w)


def test_dynamic_false_counts_every_size():
    compiled = tpg.compile(lambda x: x * 2, dynamic=False, options={"recompile_limit": 2})
    compiled(torch.randn(1))
    compiled(torch.randn(2))
    with pytest.raises(RecompileLimitError, match="dynamic=True"):
        compiled(torch.randn(3))
