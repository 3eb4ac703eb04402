"""A training step's cross entropy on Triton (interpreter): the class indices, an arange
constant (``ir.meta.IOTA``), are computed from each kernel's index instead of read per logit,
and the loss and gradients equal eager's -- rows reduced flat and in two levels, the
backward's logit gradient walked flat and by rows (``codegen_indexed.row_split``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the training models

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.triton.cache import KernelCache  # noqa: E402
from test_training_functional import _grads, eager_step  # noqa: E402


@pytest.mark.parametrize("walk", ["flat", "rows"])
@pytest.mark.parametrize("two_level", [False, True])
def test_class_indices_are_computed_and_gradients_equal_eager(monkeypatch, two_level, walk):
    from tensorplay_graph.backends.triton import codegen_indexed
    from tensorplay_graph.training import functional
    if two_level:
        monkeypatch.setattr(functional, "_max_row", lambda: 16)  # 50 classes: 5 rows of 10
    # the real threshold (4096 classes) is more than an interpreter test can afford
    monkeypatch.setattr(codegen_indexed, "ROW_WALK_MIN", 32 if walk == "rows" else 1 << 40)
    sources = []
    jit_function = KernelCache.jit_function

    def recording(self, name, source):
        sources.append(source)
        return jit_function(self, name, source)

    monkeypatch.setattr(KernelCache, "jit_function", recording)
    model, (ids, labels), want_loss, want = eager_step()
    compiled = tpg.compile(model, options={"backends": ["triton"]})
    for _ in range(2):  # the second call runs the lowered pair
        loss = compiled(ids, labels)
        loss.backward()
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
        for name, grad in _grads(model).items():
            torch.testing.assert_close(grad, want[name], rtol=1e-5, atol=1e-6, msg=name)
    # the forward's hit test and the backward's one-hot compare computed indices
    computed = [s for s in sources if re.search(r"= tl.where\(mask, [^\n]*, 0\).to\(tl.int32\)", s)]
    assert len(computed) >= 2, "\n\n".join(sources)
    assert not any(re.search(r"iota\w*_ptr \+", s) for s in sources), "an index read from memory"
    walked = [s for s in sources if "row = pid // blocks" in s]
    if walk == "flat":
        assert not walked
    else:  # the logit gradient: a program per block of a row, the row's target one scalar load
        assert walked, "\n\n".join(sources)
        assert any(re.search(r"tl\.load\(\w+_ptr \+ \w+ \* \w+_stride0\)", s) for s in walked), \
            "\n\n".join(walked)
