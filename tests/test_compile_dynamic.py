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


@pytest.mark.parametrize("dynamic", [True, None])   # None: automatic after the first size change
def test_tensorplay_ten_sequence_lengths_stay_under_the_limit(dynamic, caplog):
    caplog.set_level(logging.INFO, logger="tensorplay_graph.recompiles")
    compiled = tpg.compile(program, dynamic=dynamic, options={"recompile_limit": 2})
    w = tp.randn(8, 8)
    for n in range(3, 13):
        x = tp.randn(2, n, 8)
        np.testing.assert_allclose(compiled(x, w).numpy(), program(x, w).numpy(), rtol=1e-5, atol=1e-6)
    assert len(dynamic_logs(caplog)) == 1 and compiled.recompile_reasons == []
    compiled(tp.randn(2, 3, 8, dtype=tp.float64), w.to(tp.float64))  # a dtype change counts
    assert len(compiled.recompile_reasons) == 1
    with pytest.raises(RecompileLimitError):      # ... and so does a rank change: over the limit
        compiled(tp.randn(3, 8), w)


@pytest.mark.parametrize("dynamic", [True, None])
def test_torch_ten_sequence_lengths_compile_twice(dynamic, monkeypatch):
    """Our capture once, then Dynamo once with symbolic sizes: two compiles for ten lengths."""
    import importlib
    compiler = importlib.import_module("tensorplay_graph.compiler")
    imported = []
    backend = compiler.torch_backend
    monkeypatch.setattr(compiler, "_torch_backend",  # what the frontend hands to Dynamo
                        lambda gm, inputs, **kw: imported.append(gm) or backend(gm, inputs, **kw))
    torch._dynamo.reset()
    compiled = tpg.compile(program, dynamic=dynamic, backend="reference")
    w = torch.randn(8, 8)
    for n in range(3, 13):
        x = torch.randn(2, n, 8)
        torch.testing.assert_close(compiled(x, w), program(x, w), rtol=1e-5, atol=1e-6)
    assert compiled.captures == 1 and len(imported) == 1, (compiled.captures, len(imported))
    assert compiled.frontend == "dynamo" and "sizes change" in compiled.explain()
    x64 = torch.randn(2, 5, 8, dtype=torch.float64)     # past the handoff: Dynamo's guards decide
    torch.testing.assert_close(compiled(x64, w.double()), program(x64, w.double()))


def test_dynamic_false_counts_every_size():
    compiled = tpg.compile(lambda x: x * 2, dynamic=False, options={"recompile_limit": 2})
    compiled(torch.randn(1))
    compiled(torch.randn(2))
    with pytest.raises(RecompileLimitError, match="dynamic=True"):
        compiled(torch.randn(3))
