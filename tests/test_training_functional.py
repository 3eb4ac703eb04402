"""Framework functions differentiated in the joint graph instead of on opaque tapes.

``cross_entropy`` (torch) becomes prims, ``cat`` / ``split`` / ``embedding`` get graph-node
backwards, ``x.to(x.device)`` disappears, slice gradients that tile a dim become one ``cat``:
each program's loss and gradients equal eager's, no opaque node is left for these ops, and
the bytes saved between forward and backward stay within AOTAutograd's min-cut (Inductor's
partitioner) on the same model.
"""

from __future__ import annotations

import pytest

import tensorplay_graph as tpg
from tensorplay_graph.capture import capture
from tensorplay_graph.prims.emit import slice_backward
from tensorplay_graph.training.joint import build_joint
from tensorplay_graph.training.mincut import split_joint

torch = pytest.importorskip("torch")
F = torch.nn.functional
OPTIONS = {"backends": ["reference"]}


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TinyLM(torch.nn.Module):
    """Embedding, split q / k / v, rotate_half, a layer norm, an LM head and a float loss."""

    def __init__(self, vocab=50, width=16, reduction="mean"):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, width), torch.nn.Embedding(32, width)
        self.qkv, self.norm = torch.nn.Linear(width, 3 * width), torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.reduction = reduction

    def forward(self, ids, labels):
        pos = self.pos(torch.arange(ids.shape[1])).to(ids.device)
        h = self.tok(ids) + pos
        q, k, v = self.qkv(h).split(h.shape[-1], dim=2)
        h = self.norm(_rotate_half(q) * k + v + h)[:, 0:]
        logits = self.head(h).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1),
                               ignore_index=-100, reduction=self.reduction)


def _data(vocab=50):
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (3, 8))
    labels = ids.clone()
    labels[0, :3] = -100  # ignored positions: the mean is over the others, as in eager
    return ids, labels


def _grads(model):
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


def eager_step():
    """A seeded TinyLM, its data, and eager's loss and gradients of one step (``.grad``
    cleared again)."""
    torch.manual_seed(0)
    model, (ids, labels) = TinyLM(), _data()
    loss = model(ids, labels)
    loss.backward()
    return model, (ids, labels), loss, _grads(model)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_tiny_lm_trains_compiled_with_eager_gradients(reduction):
    torch.manual_seed(0)
    model, (ids, labels) = TinyLM(reduction=reduction), _data()

    def loss_of(fn):
        out = fn(ids, labels)
        return out.sum() if reduction == "none" else out

    want_loss = loss_of(model)
    want_loss.backward()
    want = _grads(model)
    compiled = tpg.compile(model, options=OPTIONS)
    for _ in range(2):
        loss = loss_of(compiled)
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
        loss.backward()
        for name, grad in _grads(model).items():
            torch.testing.assert_close(grad, want[name], rtol=1e-5, atol=1e-6, msg=name)
    assert "opaque" not in compiled.explain()  # no tape left: every op is a graph node


def test_long_rows_reduce_in_two_levels_with_eager_gradients(monkeypatch):
    from tensorplay_graph.training import functional
    assert functional._rows(6, 50257) == (6, 29, 1733)  # GPT-2's vocabulary
    assert functional._rows(6, 32000) == (6, 32000)
    monkeypatch.setattr(functional, "_max_row", lambda: 16)  # 50 classes: 5 rows of 10
    torch.manual_seed(0)
    model, (ids, labels) = TinyLM(), _data()
    model(ids, labels).backward()
    want = _grads(model)
    joint, split = _split(model, ids, labels)
    assert (3 * 8, 5, 10) in {n.meta["tensor_meta"].shape for n in joint.gm.graph.nodes
                              if n.meta.get("prim") is not None and
                              n.meta["prim"].name == "reshape"}
    tpg.compile(model, options=OPTIONS)(ids, labels).backward()
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, want[name], rtol=1e-5, atol=1e-6, msg=name)


def _split(model, *args):
    joint = build_joint(capture(model, *args), args)
    return joint, split_joint(joint)


def test_no_tapes_no_scatter_and_the_loss_saves_row_statistics_only():
    torch.manual_seed(0)
    model, (ids, labels) = TinyLM(), _data()
    joint, split = _split(model, ids, labels)
    assert joint.opaque == []
    backward = list(split.backward.graph.nodes)
    assert not [n for n in backward if n.target is slice_backward]
    assert [n for n in backward if n.target is torch.cat]  # split's and rotate_half's grads
    # one logits-sized value is saved (the loss's cast / exp / where recompute from it;
    # in fp32 the head's output and exp tie) plus per-row statistics
    big = [n for n in split.forward.graph.nodes if n.name in split.saved and
           n.op != "placeholder" and n.meta["tensor_meta"].numel >= 24 * 50]
    assert len(big) == 1, big


def _saved_storage_bytes(model, fn, ids, labels):
    fn(ids, labels).backward()
    model.zero_grad(set_to_none=True)
    skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip |= {ids.untyped_storage().data_ptr(), labels.untyped_storage().data_ptr()}
    found = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip:
            found[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(ids, labels)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(found.values())


def test_saved_bytes_within_aotautograd_min_cut():
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table
    torch.manual_seed(0)
    model, (ids, labels) = TinyLM(vocab=512, width=32), _data(512)
    ours = _saved_storage_bytes(model, tpg.compile(model, options=OPTIONS), ids, labels)
    torch._dynamo.reset()
    aot = torch.compile(model, backend=aot_autograd(
        fw_compiler=lambda gm, _: make_boxed_func(gm), bw_compiler=lambda gm, _: make_boxed_func(gm),
        decompositions=select_decomp_table(), partition_fn=min_cut_rematerialization_partition))
    theirs = _saved_storage_bytes(model, aot, ids, labels)
    torch._dynamo.reset()
    # (in a bf16 model the rewritten loss also halves the logits bytes kept: the bf16 head
    # output instead of eager's float32 log-probabilities; benchmarks/training_plan.py)
    assert ours <= theirs * 1.05, (ours, theirs)


def test_same_device_move_is_dropped_and_cross_device_kept():
    def f(x, w):
        return (x * w).to(x.device).sum()

    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    joint, split = _split(f, x, w)
    assert joint.opaque == []
    assert not [n for n in joint.gm.graph.nodes if n.target == "to"]
    out = tpg.compile(f, options=OPTIONS)(x, w)
    out.backward()
    torch.testing.assert_close(w.grad, x)


def test_slices_that_do_not_tile_scatter_as_before():
    def f(x):
        return (x[:, :3] * 2.0).sum() + (x[:, 2:4] ** 2).sum()  # overlapping: no cat

    x = torch.randn(4, 6, requires_grad=True)
    _, split = _split(f, x)
    assert [n for n in split.backward.graph.nodes if n.target is slice_backward]
    f(x).backward()
    want, x.grad = x.grad.clone(), None
    tpg.compile(f, options=OPTIONS)(x).backward()
    torch.testing.assert_close(x.grad, want)


def test_split_with_an_unused_piece_stays_opaque_and_correct():
    def f(x):
        a, b, _ = x.split(2, dim=1)
        return (a * b).sum()

    x = torch.randn(3, 6, requires_grad=True)
    joint, _ = _split(f, x)
    assert joint.opaque == ["split"]  # zeros for the unused piece: the framework's backward
    f(x).backward()
    want, x.grad = x.grad.clone(), None
    tpg.compile(f, options=OPTIONS)(x).backward()
    torch.testing.assert_close(x.grad, want)


def test_tensorplay_cat_and_split_backward_in_the_graph():
    tp = pytest.importorskip("tensorplay")

    def f(x, w):
        a, b = (x @ w).split(3, dim=1)
        return (tp.cat([b, a * 2.0], dim=1) * tp.cat([a, b], dim=1)).sum()

    tp.manual_seed(0)
    x, w = tp.randn(4, 5), tp.randn(5, 6, requires_grad=True)
    f(x, w).backward()
    want = w.grad.clone()
    w.grad = None
    joint, _ = _split(f, x, w)
    assert joint.opaque == []
    tpg.compile(f, options=OPTIONS)(x, w).backward()
    import numpy as np
    np.testing.assert_allclose(np.asarray(w.grad.numpy()), np.asarray(want.numpy()),
                               rtol=1e-5, atol=1e-5)


class Attention(torch.nn.Module):
    """Causal self-attention as transformers calls it: ``enable_gqa=True`` whenever no mask."""

    def __init__(self, width=16, heads=2, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, width // heads
        self.q = torch.nn.Linear(width, width)
        self.kv = torch.nn.Linear(width, 2 * kv_heads * self.dim)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.dim).transpose(1, 2)
        k, v = (y.view(b, t, self.kv_heads, self.dim).transpose(1, 2)
                for y in self.kv(x).split(self.kv_heads * self.dim, dim=2))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                             is_causal=True, scale=0.25, enable_gqa=True)
        return out.float().pow(2).mean()


@pytest.mark.parametrize("kv_heads", [2, 1])
def test_attention_with_enable_gqa_uses_the_fused_pair_only_without_grouping(kv_heads):
    """Equal head counts: ``enable_gqa`` changes nothing and the fused forward / backward pair
    replaces the tape (no opaque node, so CUDA graphs can replay it); grouped heads keep the
    tape. Gradients equal eager's either way."""
    torch.manual_seed(0)
    explain = _trains_like_eager(Attention(kv_heads=kv_heads))
    assert ("opaque" in explain) == (kv_heads == 1), explain


def _trains_like_eager(model):
    """Two compiled steps of ``model`` on one batch give eager's gradients; ``explain()``."""
    x = torch.randn(2, 8, 16)
    model(x).backward()
    want = _grads(model)
    compiled = tpg.compile(model, options=OPTIONS)
    for _ in range(2):
        compiled(x).backward()
        for name, grad in _grads(model).items():
            torch.testing.assert_close(grad, want[name], rtol=1e-4, atol=1e-6, msg=name)
    return compiled.explain()


class MaskedAttention(Attention):
    """Attention through a boolean mask the forward builds, as transformers 4.57 builds it
    under a compiler (``is_compiling()``): the causal one, or one that also hides a key.
    ``buffer``: the causal mask is a buffer instead, which the caller may write."""

    def __init__(self, hide_key=None, buffer=False):
        super().__init__()
        self.hide_key = hide_key
        if buffer:
            mask = torch.ones(8, 8, dtype=torch.bool).tril()
            self.register_buffer("mask", mask[None, None].expand(2, 1, 8, 8).clone())

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.dim).transpose(1, 2)
        k, v = (y.view(b, t, self.kv_heads, self.dim).transpose(1, 2)
                for y in self.kv(x).split(self.kv_heads * self.dim, dim=2))
        mask = getattr(self, "mask", None)
        if mask is None:
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            if self.hide_key is not None:
                mask[self.hide_key + 1:, self.hide_key] = False
            mask = mask[None, None].expand(b, 1, t, t)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=False)
        return out.float().pow(2).mean()


@pytest.mark.parametrize("hide_key", [None, 2])
def test_a_constant_causal_mask_becomes_is_causal_and_any_other_mask_keeps_the_tape(hide_key):
    torch.manual_seed(0)
    explain = _trains_like_eager(MaskedAttention(hide_key))
    assert ("opaque" in explain) == (hide_key is not None), explain


def test_a_causal_mask_buffer_is_read_each_call_not_folded():
    """The caller may write a buffer between calls: a causal mask kept in one is not turned
    into ``is_causal`` (a write hiding a key is seen by the next step, as in eager)."""
    torch.manual_seed(0)
    model = MaskedAttention(buffer=True)
    assert "opaque" in _trains_like_eager(model)
    x = torch.randn(2, 8, 16)
    compiled = tpg.compile(model, options=OPTIONS)
    compiled(x).backward()
    model.mask[:, :, 3:, 2] = False
    model.zero_grad()
    model(x).backward()
    want = _grads(model)
    model.zero_grad()
    compiled(x).backward()
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, want[name], rtol=1e-4, atol=1e-6, msg=name)


def test_a_pair_that_differs_from_the_math_kernel_keeps_the_tape(monkeypatch):
    """The check compares the pair with SDPA's math kernel, so a fused backward that returns
    wrong gradients (as torch 2.11's cuDNN one did on the H200 for some strides) is never
    written into the graph: the tape runs and the gradients stay eager's."""
    from tensorplay_graph.training import attention
    variants = attention._variants()

    def wrong_backward(*args, **kwargs):
        return tuple(g * 1.5 for g in variants["flash_cpu"].backward(*args, **kwargs)[:3])

    broken = attention._Variant("flash_cpu", variants["flash_cpu"].forward, wrong_backward,
                                variants["flash_cpu"].fwd_args, variants["flash_cpu"].bwd_args)
    monkeypatch.setattr(attention, "_variants", lambda: {**variants, "flash_cpu": broken})
    monkeypatch.setattr(attention, "_CHECKED", {})
    torch.manual_seed(0)
    explain = _trains_like_eager(Attention())
    assert "opaque" in explain, explain
