"""Conv-bn-relu blocks, eval dropout and in-place ops through the Triton backend (interpreter).

The convolution runs on the framework; batch norm (per-channel scale / shift), relu,
the residual add and the global average pool run in generated Triton kernels.
"""

from __future__ import annotations


import numpy as np
import pytest


import torch  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402
from triton_regions import lowered_summary  # noqa: E402

FRAMEWORKS = ["torch", "tensorplay"]


def _fw(name):
    if name == "torch":
        return torch
    return pytest.importorskip("tensorplay")


def _block(mod):
    nn = mod.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.drop = nn.Dropout(0.25)

        def forward(self, x):
            out = self.bn(self.conv(x))
            out += x
            out = self.drop(self.relu(out))
            return nn.functional.adaptive_avg_pool2d(out, 1)

    block = Block()
    with mod.no_grad():
        block.bn.running_mean.copy_(mod.randn(4) * 0.2)
        block.bn.running_var.copy_(mod.rand(4) + 0.5)
        block.bn.weight.copy_(mod.randn(4))
    for p in block.parameters():
        p.requires_grad_(False)
    return block.eval()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_conv_bn_add_relu_pool_runs_in_triton(framework):
    mod = _fw(framework)
    mod.manual_seed(0)
    block, x = _block(mod), mod.randn(2, 4, 8, 8)
    compiled = tpg.compile(block, backend="triton")
    got, want = compiled(x), block(x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-5)
    summary = lowered_summary(compiled)
    assert summary["kernels"], summary
    # eager: the convolution and the parameter views; nothing of the epilogue
    assert all(n.startswith(("conv2d", "reshape")) for n in summary["eager"]), summary


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_inplace_chain_on_intermediate_is_one_triton_kernel(framework):
    mod = _fw(framework)
    F = mod.nn.functional

    def program(x, y):
        h = x * 2
        h += y
        F.relu_(h)
        h.mul_(0.5)
        return F.dropout(h, 0.3, training=False) - 1

    x, y = mod.randn(33, 7), mod.randn(33, 7)
    compiled = tpg.compile(program, backend="triton")
    np.testing.assert_allclose(compiled(x, y).numpy(), program(x.clone(), y).numpy(),
                               atol=1e-6, rtol=1e-6)
    summary = lowered_summary(compiled)
    assert len(summary["kernels"]) == 1 and not summary["eager"], summary
