"""Captured TensorPlay graphs run ``tensor OP scalar`` as methods (``eager_dispatch``):
the same results as eager, for every dtype and operand kind (tensor operands stay operators)."""

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.eager_dispatch import TENSORPLAY_METHODS  # noqa: E402

DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "bool"]
SCALARS = [2, -3, 1.5, True]


def tensor(dtype, shape=(2, 3)):
    x = tp.randn(*shape) * 4
    return x > 0 if dtype == "bool" else (x.abs() + 1 if dtype == "uint8" else x).to(
        getattr(tp, dtype))


def operands():
    yield from SCALARS
    for dtype in DTYPES:
        yield tensor(dtype, (3,))   # broadcast
        yield tensor(dtype, ())     # 0-d


def eager_ops(a, b):
    """The operators eager accepts for ``(a, b)``."""
    ops = []
    for op in TENSORPLAY_METHODS:
        try:
            op(a, b)
        except Exception:  # noqa: BLE001 -- eager rejects the pair: nothing to compare
            continue
        ops.append(op)
    return ops


def same(got, want):
    assert str(got.dtype) == str(want.dtype) and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_operators_as_methods_equal_eager_for_every_operand_kind(dtype):
    a = tensor(dtype)
    for b in operands():
        ops = eager_ops(a, b)

        def program(x, y):
            return tuple(op(x, y) for op in ops)

        compiled = tpg.compile(program)
        got, want = compiled(a, b), program(a, b)
        runner = next(iter(compiled.specializations.values())).runner
        left = [n for n in runner.eager.graph.nodes if n.op == "call_function"]
        assert len(left) == (0 if type(b) in (bool, int, float) else len(ops))
        for g, w in zip(got, want):
            same(g, w)


def test_matmul_stays_and_torch_graphs_run_as_captured():
    a, b = tp.randn(3, 4), tp.randn(4, 2)
    compiled = tpg.compile(lambda x, y: (x @ y) * 2.0)
    same(compiled(a, b), (a @ b) * 2.0)
    code = next(iter(compiled.specializations.values())).runner.eager.code
    assert "x @ y" in code and ".mul(2.0)" in code
    torch = pytest.importorskip("torch")
    compiled = tpg.compile(lambda x: x * 2.0)
    compiled(torch.randn(3))
    runner = next(iter(compiled.specializations.values())).runner
    assert runner.eager is runner.captured  # torch: operators cost what methods cost


# -- buffer reuse (the program run when no value needs grad) ----------------------------
FRAMEWORKS = {"tensorplay": tp}
try:
    import torch
    FRAMEWORKS["torch"] = torch
except ImportError:  # pragma: no cover -- the suite runs with torch installed
    pass


def runner_of(compiled):
    return next(iter(compiled.specializations.values())).runner


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_dead_intermediates_are_reused_inputs_outputs_and_viewed_values_never(fw):
    lib = FRAMEWORKS[fw]

    def program(x, y):
        a = x * 2.0                   # viewed below: never written
        v = a.reshape(-1)
        b = (a + 1.0).relu() * 3.0    # a chain of dead intermediates
        c = b * 0.5 + y               # y is an input: never written
        kept = c * 2.0                # an output read again below
        return v, kept, kept + 1.0

    compiled = tpg.compile(program)
    x, y = lib.randn(4, 5), lib.randn(4, 5)
    x0, y0 = x.clone(), y.clone()
    compiled(x, y)
    for got, want in zip(compiled(x, y), program(x, y)):
        same(got, want)
    same(x, x0), same(y, y0)
    runner = runner_of(compiled)
    assert runner.steady_callable() is runner.no_grad
    assert "_(" in runner.no_grad.code, "no buffer was reused"


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_calls_that_may_need_grad_run_without_buffer_reuse(fw):
    lib = FRAMEWORKS[fw]
    model = lib.nn.Linear(5, 5)
    for p in model.parameters():
        p.requires_grad_(False)       # frozen: unfrozen after the first calls

    def program(x):
        return ((model(x) * 2.0).relu() + 1.0).exp() * 0.5

    compiled = tpg.compile(program)
    x = lib.randn(3, 5)
    with lib.no_grad():
        same(compiled(x), program(x))
    compiled(x)
    assert "_(" in runner_of(compiled).no_grad.code
    for p in model.parameters():
        p.requires_grad_(True)
    compiled(x).sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    program(x).sum().backward()
    for p, w in zip(model.parameters(), want):
        np.testing.assert_allclose(p.grad.numpy(), w.numpy(), rtol=1e-6)
    xg = lib.randn(3, 5).requires_grad_()
    compiled(xg).sum().backward()
    assert xg.grad is not None


# -- where TensorPlay reuses: the ops and sizes measured to pay (_tensorplay_reuse_pays) ---
def reused_code(program, *args):
    """The buffer-reusing program's code, after checking compiled equals eager."""
    compiled = tpg.compile(program)
    compiled(*args)
    got, want = compiled(*args), program(*args)
    for g, w in (zip(got, want) if isinstance(want, tuple) else [(got, want)]):
        same(g, w)
    runner = runner_of(compiled)
    assert runner.steady_callable() is runner.no_grad
    return runner.no_grad.code


def test_tensorplay_reuses_tensor_operands_only_from_the_measured_sizes():
    from tensorplay_graph.eager_dispatch import (TENSORPLAY_BROADCAST_BYTES,
                                                 TENSORPLAY_SAME_SHAPE_BYTES)

    def same_shape(x, y):
        return (x * y) - y            # the product is dead: sub_ into it, if it pays

    def broadcast(x, r):
        return (x * 2.0 + 1.0) * r    # mul_ by a row, into a dead intermediate

    rows = TENSORPLAY_SAME_SHAPE_BYTES // 4 // 256   # float32 rows of 256 at the threshold
    for n, reused in ((8, False), (rows - 1, False), (rows, True)):
        code = reused_code(same_shape, tp.randn(n, 256), tp.randn(n, 256))
        assert (".sub_(" in code) == reused, (n, code)
    rows = TENSORPLAY_BROADCAST_BYTES // 4 // 256
    for n, reused in ((rows // 2, False), (rows, True)):
        code = reused_code(broadcast, tp.randn(n, 256), tp.randn(256))
        assert (".mul_(" in code.replace(".mul_(2.0)", "")) == reused, (n, code)


def test_tensorplay_never_reuses_the_ops_measured_slower_or_inexact_at_any_size():
    x, y, r = tp.randn(1024, 512), tp.randn(1024, 512), tp.randn(512)   # 2 MiB
    code = reused_code(lambda x, y, r: ((x * y) + r, (x * y) / y, (x * y).exp(),
                                        (x * y) - 1.0), x, y, r)
    for op in (".add_(", ".div_(", ".exp_(", ".sub_("):
        assert op not in code, (op, code)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64"])
def test_scalar_ops_reuse_small_buffers_and_equal_eager(dtype):
    x = tensor(dtype, (4, 8))
    code = reused_code(lambda x: (((x * 3) / 2).relu() + 1) * 2, x)
    # the product (int or float) takes the true division's result only when dtypes agree
    assert (".div_(2)" in code) == dtype.startswith("float"), code
    assert ".add_(1)" in code and ".mul_(2)" in code


def test_torch_reuses_dead_buffers_at_every_size():
    torch = pytest.importorskip("torch")
    for n in (8, 1024):
        assert ".sub_(" in reused_code(lambda x, y: (x * y) - y, torch.randn(n, 64),
                                       torch.randn(n, 64))
