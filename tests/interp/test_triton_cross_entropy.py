"""Cross entropy through the product path vs eager, in Triton's interpreter.

``F.cross_entropy`` with class-index targets decomposes (``passes/decompose_losses``) into
``cross_entropy_rows`` -- one row kernel: max, sum of exp and the target's logit in
registers, log-probabilities never stored -- and the mean / sum over the rows in a second,
small kernel. Every test checks the lowered graph too: an all-eager graph would also match.
"""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
from triton_regions import lowered_summary  # noqa: E402

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float64: 1e-10}


def _check(fn, *args, kernels=None):
    compiled = tpg.compile(fn, backend="triton")
    got, want = compiled(*args), fn(*args)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    tol = TOL[want.dtype]
    torch.testing.assert_close(got, want, atol=tol, rtol=tol, equal_nan=True)
    shape = lowered_summary(compiled)
    assert not shape["eager"], shape
    if kernels is not None:
        plan = tpg.explain(fn, *args, backend="triton")
        assert len(shape["kernels"]) == 1 and len(plan.regions) == 1, plan
        assert plan.kernels[0].source.count("@triton.jit") == kernels, plan.kernels[0].source
        assert "cross_entropy_rows" in plan.regions[0].nodes
    return got


def _targets(n, classes, ignore=-100, every=5):
    t = torch.randint(0, classes, (n,))
    t[::every] = ignore
    return t


@pytest.mark.parametrize("reduction,kernels", [("mean", 2), ("sum", 2), ("none", 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cross_entropy_matches_eager(reduction, kernels, dtype):
    torch.manual_seed(0)
    logits, target = torch.randn(37, 1000).to(dtype) * 4, _targets(37, 1000)
    _check(lambda x, t: F.cross_entropy(x, t, reduction=reduction), logits, target, kernels=kernels)


def test_upcast_logits_fuse_into_the_row_kernel():
    """The benchmark's form: bf16 logits cast to float32 inside the program (never stored)."""
    logits, target = torch.randn(64, 3001, dtype=torch.bfloat16), _targets(64, 3001, every=7)
    _check(lambda x, t: F.cross_entropy(x.float(), t), logits, target, kernels=2)


def test_ignore_index_and_all_ignored():
    logits = torch.randn(9, 17)
    target = _targets(9, 17, ignore=3, every=2)
    _check(lambda x, t: F.cross_entropy(x, t, ignore_index=3), logits, target)
    none = torch.full((9,), -100)
    got = _check(lambda x, t: F.cross_entropy(x, t), logits, none)
    assert torch.isnan(got)  # 0 / 0, as eager


def test_special_values():
    logits = torch.randn(6, 33)
    logits[0, 5] = float("nan")     # a NaN logit: the row's loss is NaN
    logits[1, :] = float("-inf")    # all -inf: NaN
    logits[2, 7] = float("inf")     # +inf: NaN
    logits[3, 0] = -1e30            # huge but finite: exact
    target = torch.tensor([1, 2, 3, 0, -100, 4])
    logits[4, :] = float("nan")     # an ignored row contributes 0 whatever it holds
    _check(lambda x, t: F.cross_entropy(x, t, reduction="none"), logits, target)
    _check(lambda x, t: F.cross_entropy(x, t, reduction="sum"), logits[3:], target[3:])


@pytest.mark.parametrize("shape,target_shape", [((4, 11, 5), (4, 5)), ((13,), ()), ((1, 1), (1,))],
                         ids=["spatial", "unbatched", "one-class"])
def test_odd_shapes(shape, target_shape):
    logits = torch.randn(*shape, dtype=torch.float64)
    target = torch.randint(0, shape[1] if len(shape) > 1 else shape[0], target_shape)
    for reduction in ("mean", "none"):
        _check(lambda x, t: F.cross_entropy(x, t, reduction=reduction), logits, target)


def test_empty_batch_runs_eagerly_like_eager():
    fn = lambda x, t: F.cross_entropy(x, t)  # noqa: E731
    logits, target = torch.randn(0, 7), torch.zeros(0, dtype=torch.long)
    got = tpg.compile(fn, backend="triton")(logits, target)
    torch.testing.assert_close(got, fn(logits, target), equal_nan=True)


def test_weight_label_smoothing_and_gradients_keep_the_framework_call():
    logits, target, weight = torch.randn(8, 10), torch.randint(0, 10, (8,)), torch.rand(10)
    for fn in (lambda x, t: F.cross_entropy(x, t, weight=weight),
               lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1)):
        plan = tpg.explain(fn, logits, target, backend="triton")
        assert "cross_entropy_rows" not in str(plan)
        torch.testing.assert_close(tpg.compile(fn, backend="triton")(logits, target), fn(logits, target))
    leaf = logits.clone().requires_grad_()
    compiled = tpg.compile(lambda x, t: F.cross_entropy(x * 2.0, t), backend="triton")
    compiled(leaf, target).backward()
    want = logits.clone().requires_grad_()
    F.cross_entropy(want * 2.0, target).backward()
    torch.testing.assert_close(leaf.grad, want.grad)


def test_vocabulary_longer_than_registers_loops():
    """A 40000-class row exceeds what a rows kernel holds: two loops over it (max, then the
    sum of exp and the target's logit)."""
    logits, target = torch.randn(3, 40000), _targets(3, 40000, every=2)
    _check(lambda x, t: F.cross_entropy(x, t), logits, target, kernels=2)
    plan = tpg.explain(lambda x, t: F.cross_entropy(x, t), logits, target, backend="triton")
    assert "2 loop(s) over the row" in plan.kernels[0].source
