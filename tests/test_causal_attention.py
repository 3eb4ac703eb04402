"""A causal mask the program builds becomes ``is_causal=True`` (``passes/causal_attention.py``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.passes.causal_attention import is_attention  # noqa: E402

B, H, S, D = 2, 3, 8, 16


def _qkv(queries=S, keys=S):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, H, queries, D, generator=g), torch.randn(B, H, keys, D, generator=g),
            torch.randn(B, H, keys, D, generator=g))


def made_causal(q, k, v):  # as transformers 4.57 builds it when a compiler traces it
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[None, None].expand(B, 1, S, S))


def made_other(q, k, v):  # causal, and key 2 hidden from every later query
    mask = torch.ones(S, S, dtype=torch.bool).tril()
    mask[3:, 2] = False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def made_rectangular(q, k, v):  # 4 queries, 8 keys: the mask's alignment is not torch's
    return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(4, 8, dtype=torch.bool).tril())


def _attention_kwargs(fn, *args):
    plan = tpg.explain(fn, *args, backend="reference")
    (node,) = [n for n in plan.graph_module.graph.nodes if is_attention(n)]
    return node.kwargs


def made_causal_keywords(q, k, v):  # transformers 4.57's ALBERT passes every tensor by keyword
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=mask)


@pytest.mark.parametrize("fn", [made_causal, made_causal_keywords])
def test_a_causal_mask_the_program_builds_becomes_is_causal(fn):
    args = _qkv()
    kwargs = _attention_kwargs(fn, *args)
    assert kwargs.get("attn_mask") is None and kwargs.get("is_causal") is True
    torch.testing.assert_close(tpg.compile(fn)(*args), fn(*args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn, shapes", [(made_other, (S, S)), (made_rectangular, (4, 8))])
def test_any_other_mask_is_passed_as_it_is(fn, shapes):
    args = _qkv(*shapes)
    kwargs = _attention_kwargs(fn, *args)
    assert kwargs.get("attn_mask") is not None and not kwargs.get("is_causal", False)
    torch.testing.assert_close(tpg.compile(fn)(*args), fn(*args), rtol=1e-5, atol=1e-6)


GLOBAL_MASK = torch.ones(S, S, dtype=torch.bool).tril()


def global_mask(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=GLOBAL_MASK)


def test_a_causal_mask_the_caller_owns_is_read_on_every_call():
    args = _qkv()
    assert _attention_kwargs(global_mask, *args).get("attn_mask") is not None
    compiled = tpg.compile(global_mask)
    torch.testing.assert_close(compiled(*args), global_mask(*args), rtol=1e-5, atol=1e-6)
    try:
        GLOBAL_MASK[5:, 1] = False  # written between calls: the next call must see it
        torch.testing.assert_close(compiled(*args), global_mask(*args), rtol=1e-5, atol=1e-6)
    finally:
        GLOBAL_MASK[5:, 1] = True


def test_explain_says_attention_stays_on_the_frameworks_kernels_and_why_it_reads_no_mask():
    args = _qkv()
    plan = tpg.explain(made_causal, *args, backend="reference")
    (name,) = [n.name for n in plan.graph_module.graph.nodes if is_attention(n)]
    reason = plan.barriers[name]
    assert plan.barrier_codes[name] == "no_prim" and "flash / cuDNN" in reason, reason
    assert "add a prim record" not in reason and "became is_causal=True" in reason, reason
    other = tpg.explain(made_other, *args, backend="reference")
    (name,) = [n.name for n in other.graph_module.graph.nodes if is_attention(n)]
    assert "flash / cuDNN" in other.barriers[name] and "is_causal" not in other.barriers[name]
