"""TensorPlay's attention and recurrent modules through tensorplay_graph.compile equal eager."""

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")

import tensorplay.nn as nn  # noqa: E402

import tensorplay_graph as tpg  # noqa: E402


def leaves(value):
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in leaves(item)]
    return [] if value is None else [value]


def check(module, *inputs, grad=False):
    compiled = tpg.compile(module)
    with tp.set_grad_enabled(grad):
        got, want = compiled(*inputs), module(*inputs)
    got, want = leaves(got), leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert compiled.frontend == "tensorplay_graph"   # our own capture took it whole
    return compiled


@pytest.mark.parametrize("grad", [False, True])
def test_transformer_encoder_layer(grad):
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    x = tp.randn(2, 5, 16)
    compiled = check(layer, x, grad=grad)
    graph = next(iter(compiled.specializations.values())).captured.graph
    sdpa = [n for n in graph.nodes if n.target is tp.nn.functional.scaled_dot_product_attention]
    assert len(sdpa) == 1 and "attn_mask" in sdpa[0].kwargs  # the public function, replayable
    mask = tp.triu(tp.full((5, 5), float("-inf")), diagonal=1)
    check(layer, x, mask, grad=grad)   # src_mask: F._none_or_dtype sees a proxy


@pytest.mark.parametrize("grad", [False, True])
def test_multihead_attention(grad):
    attention = nn.MultiheadAttention(16, 2).eval()
    q, k = tp.randn(5, 2, 16), tp.randn(5, 2, 16)
    check(attention, q, k, k, grad=grad)


@pytest.mark.parametrize("grad", [False, True])
def test_lstm(grad):
    lstm = nn.LSTM(8, 16, batch_first=True)
    check(lstm, tp.randn(2, 5, 8), grad=grad)
