"""Triton kernels in a channels_last conv net (TRITON_INTERPRET=1): each pointwise kernel
writes its output NHWC with no copy after it, batch norm's per-channel operands are loaded
once per tile column, and results equal eager; tiled kernels over NCHW and mixed layouts too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import tensorplay_graph as tpg
from tensorplay_graph.passes.eager_layout import to_eager_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the models package

from models.resnets import resnet50ish  # noqa: E402

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def lowered(compiled):
    return list(next(iter(compiled.specializations.values())).lowered.graph.nodes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_resnet_regions_run_nhwc(dtype):
    model = resnet50ish(width=4).to(dtype)
    x = torch.randn(2, 3, 32, 32, dtype=dtype)
    compiled = tpg.compile(model, backend="triton",
                           options={"channels_last": True, "cuda_graphs": False})
    with torch.no_grad():
        got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want, **TOL[dtype])
    nodes = lowered(compiled)
    kernels = [n.meta["kernel"] for n in nodes if n.meta.get("backend") == "triton"]
    # every kernel is pointwise (global pooling of NHWC runs eagerly) and writes NHWC itself
    assert kernels and all(all(k.launch["eager_strides"]) for k in kernels)
    assert not any(n.target is to_eager_layout for n in nodes)  # no copy after any kernel
    tiled = [k.source for k in kernels if "BLOCK_C" in k.source]
    assert tiled and all("mask=cmask" in src for src in tiled)  # per-channel: [1, BLOCK_C]


def per_channel(x, w, b):
    return torch.relu(x * w.view(-1, 1, 1) + b.view(-1, 1, 1))


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "mixed"])
def test_tiled_kernels_equal_eager(layout):
    x = torch.randn(3, 24, 5, 7)
    y = torch.randn(3, 24, 5, 7)
    if layout in ("nhwc", "mixed"):
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(24), torch.randn(24)

    def program(x, y, w, b):
        return per_channel(x, w, b) + y * 0.5

    compiled = tpg.compile(program, backend="triton", options={"cuda_graphs": False})
    if layout == "nhwc":
        y = y.contiguous(memory_format=torch.channels_last)
    got, want = compiled(x, y, w, b), program(x, y, w, b)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    kernel = next(n.meta["kernel"] for n in lowered(compiled) if "kernel" in n.meta)
    assert "BLOCK_C" in kernel.source  # a broadcast operand: the tiled kernel
