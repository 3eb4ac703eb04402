"""Sibling regions merged into one kernel (``passes/siblings.py``) compute eager's values.

The Llama attention pattern: after the q / k / v projections are one GEMM
(``passes/merge_linears.py``, applied here to CPU tensors), q's rotary embedding, k's and
v's copies into a KV cache (a ``cat`` with an empty past) read slices of one product and
become one Triton kernel.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
import tensorplay_graph.passes.decompose as decompose_module  # noqa: E402
from tensorplay_graph.passes.merge_linears import merge_sibling_linears  # noqa: E402


def two_readers(x, w):
    y = x @ w
    return torch.relu(y) * 2, torch.sigmoid(y) + 1


class CachedAttention(torch.nn.Module):
    def __init__(self, width=32, heads=2):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (torch.nn.Linear(width, width, bias=False) for _ in range(3))
        self.register_buffer("past", torch.zeros(2, heads, 0, width // heads))

    def split(self, y):
        b, t, _ = y.shape
        return y.view(b, t, self.heads, -1).transpose(1, 2)

    def forward(self, x, cos, sin):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        half = q.shape[-1] // 2

        def rope(t):
            return t * cos + torch.cat((-t[..., half:], t[..., :half]), -1) * sin
        k = torch.cat((self.past, rope(k)), 2)
        v = torch.cat((self.past, v), 2)
        out = F.scaled_dot_product_attention(rope(q), k, v, is_causal=True)
        return out.transpose(1, 2).reshape(x.shape)


def _kernel_count(plan, node_name):
    region = plan.region_of(node_name)
    return len(plan.kernels[region.id].launch["kernels"])


def test_two_readers_are_one_kernel_with_eagers_values():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 32, generator=g), torch.randn(32, 32, generator=g)
    plan = tpg.explain(two_readers, x, w, backend="triton")
    assert plan.region_of("relu") is plan.region_of("sigmoid")
    assert _kernel_count(plan, "relu") == 1
    compiled = tpg.compile(two_readers, backend="triton")
    for got, want in zip(compiled(x, w), two_readers(x, w)):
        torch.testing.assert_close(got, want)


def test_rope_and_cache_copies_of_merged_projections_are_one_kernel(monkeypatch):
    merge = merge_sibling_linears
    monkeypatch.setattr(decompose_module, "merge_sibling_linears",
                        lambda gm, fw: merge(gm, fw, devices=("cpu", "cuda"), sm_count=132))
    torch.manual_seed(0)
    model = CachedAttention().to(torch.float16).eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 32, generator=g).to(torch.float16)
    angles = torch.randn(8, 16, generator=g)
    cos, sin = angles.cos().to(torch.float16), angles.sin().to(torch.float16)
    plan = tpg.explain(model, x, cos, sin, backend="triton")
    (region,) = plan.regions  # q's rope, k's rope and cache copy, v's cache copy
    assert len(region.outputs) == 3 and _kernel_count(plan, region.nodes[0]) == 1
    compiled = tpg.compile(model, backend="triton")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, cos, sin), model(x, cos, sin), atol=2e-3, rtol=2e-3)
