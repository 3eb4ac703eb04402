"""Where eager's result is permuted, the lowered program lays the output out as eager's, so a
later reshape / contiguous / in-place write aliases exactly as in eager (fuzz 1009130,
1010814): a pointwise Triton kernel writes eager's strides itself (no copy after it); other
kernels write row-major and ``to_eager_layout`` copies (``passes/eager_layout.py``)."""

from __future__ import annotations

import numpy as np
import torch

import tensorplay_graph as tpg
from tensorplay_graph.passes.eager_layout import to_eager_layout


def transposed(shape, seed):
    mem = list(shape)
    mem[-1], mem[-2] = mem[-2], mem[-1]
    data = np.random.default_rng(seed).standard_normal(mem).astype(np.float32) * 2
    return torch.from_numpy(data).transpose(-1, -2)


def where_reshape_add(x):
    v = torch.where(x > -1, x, -0.0)
    flat = v.reshape(-1)  # a copy of a permuted v, a view of a row-major one
    flat.add_(1)
    return v, flat


def cast_contiguous_add(x):
    v = x.to(torch.int32)
    c = v.contiguous()    # a copy of a permuted v, v itself if row-major
    v.add_(1)
    return c, v


def check(program, shape, seed):
    compiled = tpg.compile(program, backend="triton")
    got, want = compiled(transposed(shape, seed)), program(transposed(shape, seed))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    runner = next(iter(compiled.specializations.values()))
    nodes = list(runner.lowered.graph.nodes)
    kernels = [n.meta["kernel"] for n in nodes if n.meta.get("backend") == "triton"]
    assert kernels  # a kernel ran
    assert all(all(k.launch["eager_strides"]) for k in kernels)   # pointwise: written so
    assert not any(n.target is to_eager_layout for n in nodes)     # ... with no copy after


def test_where_output_keeps_eager_layout():
    check(where_reshape_add, (2, 3, 8), 1)


def test_cast_output_keeps_eager_layout():
    check(cast_contiguous_add, (5, 4, 3), 2)
