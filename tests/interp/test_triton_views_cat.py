"""Views and ``cat`` inside Triton kernels (index arithmetic), compiled == eager.

Each program is compiled for the triton backend under ``TPG_STRICT_LOWERING`` (a claimed
region that fails to build raises instead of running eagerly); the plan must hold the
views / cat in a region (so the kernel really did the index arithmetic), and results,
dtypes and strides must equal torch's eager results. Aliasing cases check that a view
leaving a kernel still shares memory the way eager's does.
"""

from __future__ import annotations

import pytest
import torch

import tensorplay_graph as tpg


pytestmark = pytest.mark.usefixtures("strict")  # conftest.py


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 2).to(dtype)


def _fused(program, *args):
    """Names of the nodes in Triton regions of ``program``'s plan."""
    plan = tpg.explain(program, *args, backend="triton", compile_kernels=False)
    return {name for region in plan.regions for name in region.nodes}


def check(program, *args, fused=()):
    """compiled == eager (values, dtype, strides); ``fused`` node-name prefixes sit in regions."""
    names = _fused(program, *args)
    for prefix in fused:
        assert any(n.startswith(prefix) for n in names), (prefix, sorted(names))
    compiled = tpg.compile(program, backend="triton")
    got, want = compiled(*args), program(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
        tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(w.dtype, 0)
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    return compiled


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary(q, cos, sin):
    return q * cos + rotate_half(q) * sin


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_in_every_dim(dim):
    x, y = _rand(3, 4, 5), _rand(3, 4, 5, seed=1)
    check(lambda a, b: torch.cat((a * 2, b.exp()), dim) + 1, x, y, fused=("cat",))


def test_cat_of_three_uneven_pieces_and_broadcast_operands():
    a, b, c = _rand(2, 3), _rand(2, 5, seed=1), _rand(2, 1, seed=2)
    bias = _rand(1, 5, seed=3)
    check(lambda a, b, c, bias: torch.cat([a.relu(), b + bias, c], 1) * 3, a, b, c, bias,
          fused=("cat",))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cat_16_bit_and_mixed_dtypes(dtype):
    x, y = _rand(4, 6, dtype=dtype), _rand(4, 2, seed=1)
    check(lambda x: torch.cat((x, -x), -1) * 0.5, x, fused=("cat",))
    check(lambda x, y: torch.cat((x, y), -1) + 1, x, y, fused=("cat",))   # promotes to fp32


def test_cat_with_empty_pieces_and_empty_results():
    x, e = _rand(2, 3), torch.empty(2, 0)
    check(lambda x, e: torch.cat((e, x * 2, e), 1) + 1, x, e, fused=("cat",))
    check(lambda e: torch.cat((e, e + 1), 0) * 2, e, fused=("cat",))
    check(lambda x, l: torch.cat((l, x + 1)), _rand(4), torch.empty(0), fused=("cat",))


def test_cat_alone_is_a_fresh_copy():
    x, y = _rand(3, 4), _rand(2, 4, seed=1)
    compiled = check(lambda x, y: torch.cat((x, y)), x, y, fused=("cat",))
    out = compiled(x, y)
    assert out.data_ptr() not in (x.data_ptr(), y.data_ptr())


def test_slices_with_steps_and_offsets():
    x = _rand(9, 10)
    check(lambda x: x[1::2, ::3] * 2 + x[:8:2, 5:9], x, fused=("getitem",))
    check(lambda x: x[..., -3:].sigmoid() + x[2, None, 1:4], x, fused=("getitem",))
    check(lambda x: x.narrow(1, 2, 5) * x.narrow(1, -5, 5), x, fused=("narrow",))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_block_is_one_kernel(dtype):
    q = _rand(2, 8, 4, 16, dtype=dtype).transpose(1, 2)   # (b, heads, t, d) over (b, t, heads, d)
    cos, sin = _rand(1, 1, 8, 16, dtype=dtype, seed=1), _rand(1, 1, 8, 16, dtype=dtype, seed=2)
    plan = tpg.explain(rotary, q, cos, sin, backend="triton", compile_kernels=False)
    assert len(plan.regions) == 1 and any(n.startswith("cat") for n in plan.regions[0].nodes)
    check(rotary, q, cos, sin)


def test_transposed_and_permuted_inputs_and_absorbed_copies():
    x, y = _rand(4, 6), _rand(6, 4, seed=1)
    check(lambda x, y: x.transpose(0, 1) * y + 1, x, y, fused=("transpose",))
    z = _rand(2, 3, 4, 5, seed=2)
    check(lambda z: z.permute(0, 2, 3, 1).reshape(2, 20, 3).contiguous() * 2, z,
          fused=("permute", "reshape", "contiguous"))
    check(lambda z: (z.transpose(1, 2) + 1).reshape(2, 4, 15).tanh(), z, fused=("reshape",))


def test_expand_reshape_copy_is_written_by_the_kernel():
    k = _rand(2, 2, 8, 4)

    def repeat_kv(k):  # Llama's repeat_kv: a copying reshape of an expanded view
        k = k * 2
        return k[:, :, None].expand(2, 2, 3, 8, 4).reshape(2, 6, 8, 4)
    check(repeat_kv, k, fused=("expand", "reshape"))


def test_escaping_view_shares_memory_as_in_eager():
    x = _rand(3, 4)

    def program(x):
        y = x * 2
        return y, y.t() + 0 * 0, y.t(), y[1:]

    compiled = check(program, x)
    y, _, yt, tail = compiled(x)
    assert yt.data_ptr() == y.data_ptr() and tail.data_ptr() == y.data_ptr() + 4 * 4
    y.add_(1)   # a write through one name is seen through the others, as in eager
    torch.testing.assert_close(yt, y.t(), rtol=0, atol=0)


def test_view_written_in_place_keeps_eager_aliasing():
    x = _rand(3, 4)

    def program(x):
        y = x.exp()
        v = y.view(-1)[2:]
        v.mul_(10)
        return y + 1, v.t() if v.ndim > 1 else v * 1

    check(program, x)


def test_reduction_region_with_views_and_cat():
    x, w = _rand(4, 8), _rand(8, seed=1)

    def program(x, w):
        h = torch.cat((x[:, 4:], x[:, :4]), -1) * w
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6), h.t()

    check(program, x, w, fused=("cat", "mean"))


def _split_by_barrier(m):
    """``v`` is read by two regions (a flip, which has no prim, sits between them): the first
    writes ``y``, and ``v`` reaches the second as eager's own view of ``y`` (a view step)."""
    def program(x):
        y = x * 2
        v = y.transpose(0, 1)
        b = m.flip(v * 3, (0,))
        return m.cat((v[:, 2:], -v[:, :2]), 1) + b + v, y
    return program


def test_view_read_across_regions_is_an_eager_view():
    x = _rand(4, 5)
    plan = tpg.explain(_split_by_barrier(torch), x, backend="triton")
    assert len(plan.regions) == 2 and "transpose" in plan.regions[0].nodes
    launches = plan.kernels[plan.regions[0].id].launch["kernels"]
    assert "eager_view_transpose" in launches, launches
    check(_split_by_barrier(torch), x)


def test_tensorplay_cat_and_view_step():
    tp = pytest.importorskip("tensorplay")
    import numpy as np

    program = _split_by_barrier(tp)
    x = tp.tensor(_rand(4, 5).tolist())
    assert {"cat", "transpose"} <= {n.rstrip("_0123456789") for n in _fused(program, x)}
    compiled = tpg.compile(program, backend="triton")
    for got, want in zip(compiled(x), program(x)):
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_allclose(np.asarray(got.numpy()), np.asarray(want.numpy()), rtol=1e-6)


def test_split_and_chunk_pieces_are_read_in_place():
    x = _rand(3, 12)

    def qkv(x):
        q, k, v = x.split(4, dim=-1)
        return q * k + v

    def halves(x):
        a, b = torch.chunk(x.transpose(0, 1), 2, 0)   # uneven pieces of a transposed value
        return a[:6] - b.exp()

    y = _rand(3, 13, seed=1)   # pieces of 7 and 6 rows
    check(qkv, x, fused=("getitem", "mul", "add"))
    check(halves, y, fused=("getitem", "transpose", "exp"))
    assert not any(n.startswith(("split", "chunk")) for n in _fused(qkv, x) | _fused(halves, y))


def test_views_beside_a_norm_stay_free_views():
    """A region that reduces: a view of an input is read strided (no copy kernel); a view of
    a computed value is eager's view of the value the first kernel writes."""
    x, r = _rand(8, 16), _rand(2, 4, 16, seed=1)

    def program(x, r):
        h = torch.nn.functional.layer_norm(x.view(2, 4, 16) + r, (16,))
        return h, (h * 2).transpose(1, 2).amax(-1)

    plan = tpg.explain(program, x, r, backend="triton")
    launches = [k for rid in plan.kernels for k in plan.kernels[rid].launch["kernels"]]
    assert not any("indexed" in k for k in launches), launches
    assert any(k.startswith("eager_view") for k in launches), launches
    check(program, x, r, fused=("view", "layer_norm", "transpose", "amax"))


def _split_softmax_backward(x, m, lab, iota):
    """The shape of a split cross-entropy backward: logits reshaped (2, 4, 15) -> (8, 15) ->
    (8, 3, 5), per-row values broadcast, the class index read through a reshape, back to
    (8, 15)."""
    y = x.reshape(8, 15).reshape(8, 3, 5).float()
    hit = iota.reshape(3, 5) == lab
    g = torch.where(hit, -m, 0.0).to(x.dtype).reshape(8, 15)
    return g + ((y - m).exp() * m).to(x.dtype).reshape(8, 15)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_reshape_round_trip_reads_a_row_major_input_at_the_flat_index(layout):
    dtype = torch.bfloat16
    x = _rand(2, 4, 15, dtype=dtype)
    if layout == "transposed":  # same values, other strides: read by coordinates
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    m = torch.rand(8, 1, 1, generator=torch.Generator().manual_seed(3))
    lab, iota = torch.randint(0, 15, (8, 1, 1), generator=torch.Generator().manual_seed(4)), \
        torch.arange(15)
    check(_split_softmax_backward, x, m, lab, iota, fused=("reshape", "eq", "exp", "add"))
    plan = tpg.explain(_split_softmax_backward, x, m, lab, iota, backend="triton")
    (region,) = plan.regions
    source = plan.kernels[region.id].source
    flat = "tl.load(x_ptr + offs," in source
    assert flat == (layout == "contiguous"), source
    assert "tl.load(iota_ptr + offs % 15," in source  # a trailing-dims operand: flat mod 15


def test_flat_index_is_not_used_through_a_broadcast_or_a_transpose():
    x, y = _rand(6, 4), _rand(4, 1, seed=1)
    # (4, 6) output read through a transpose: coordinates, not the output's flat index
    check(lambda x, y: x.t().reshape(4, 2, 3).reshape(4, 6) * y, x, y, fused=("reshape",))
    z = _rand(3, 1, 5, seed=2)
    # a broadcast operand inside a reshape chain: its size-1 dim is read at coordinate 0
    check(lambda z, w: (z.expand(3, 4, 5).reshape(12, 5) + w.reshape(12, 5)).reshape(3, 20),
          z, _rand(3, 4, 5, seed=3), fused=("expand", "reshape"))
