"""Column reductions (reduced dims strided in memory) vs eager, in Triton's interpreter.

Each program must lower to the column kernel (``codegen_columns``): a loop over the
reduced index with tiles coalesced along the kept dims; tall inputs split the reduced
index (partial results, combined in order by the last program of each column block). Special values, odd shapes, size-1 and
empty dims, keepdim and the epilogue fused after the reduction are checked against eager.
"""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.triton import BACKEND  # noqa: E402
from tensorplay_graph.backends.triton.columns import column_config  # noqa: E402
from triton_regions import check_case, lowered_summary  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _reduce(target, **kw):
    return lambda b, x: b.call(target, x, **kw)


PROGRAMS = {
    "sum0": _reduce(torch.sum, dim=0),
    "mean0_keepdim": _reduce(torch.mean, dim=0, keepdim=True),
    "amax0": _reduce(torch.amax, dim=0),
    "amin0": _reduce(torch.amin, dim=0),
    "sum_dims01": _reduce(torch.sum, dim=(0, 1)),
    "sum_squares_scaled": lambda b, x: b.call(torch.mul, b.call(
        torch.sum, b.call(torch.mul, x, x), dim=0), 0.5),
}


def _kind(kernel) -> str:
    src = kernel.source
    if "BLOCK_R" not in src:
        return "rows"
    return "split" if "tickets_ptr" in src else "columns"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("shape", [(300, 40), (700, 45), (3, 5, 129)], ids=str)
def test_column_reductions_match_eager(name, dtype, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape, dtype=DTYPES[dtype])
    _, kernel = check_case(BACKEND, PROGRAMS[name], (x,), dtype)
    whole = name == "sum_dims01" and len(shape) == 2  # every dim: one contiguous row
    assert (_kind(kernel) == "rows") == whole, kernel.source


def test_tall_input_splits_and_is_deterministic():
    x = torch.randn(2000, 24)
    assert column_config(24, 2000).split > 1
    _, kernel = check_case(BACKEND, PROGRAMS["sum0"], (x,), "float32")
    assert _kind(kernel) == "split"
    first, second = kernel(x)[0], kernel(x)[0]
    assert torch.equal(first, second)


@pytest.mark.parametrize("name", ["sum and amin", "sum of squares * 0.25 + 1"])
def test_many_splits_combine_in_chunks(monkeypatch, name):
    """42 splits: the last program reads the partials 16 at a time (three loads, the last
    partly masked with the reduction's neutral element) and matches eager, run to run."""
    from tensorplay_graph.backends.triton.codegen_columns import SPLIT_CHUNK
    monkeypatch.setenv("TPG_TRITON_COLUMN_CONFIG", "16,64,4,50")
    split = column_config(40, 2000).split
    assert split > 2 * SPLIT_CHUNK and split % SPLIT_CHUNK
    x = torch.randn(2000, 40) + 3.0  # all positive: amin's padding must not be 0
    _, kernel = check_case(BACKEND, SPLIT_PROGRAMS[name](0), (x,), "float32")
    assert _kind(kernel) == "split"
    first, second = kernel(x), kernel(x)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_split_tickets_are_reset_by_the_last_program():
    """Every column block's ticket counter is back at zero after each launch (the next
    launch's last program is the one holding ticket n_split - 1), across specializations."""
    from tensorplay_graph.backends.triton.columns import SplitLaunch
    from tensorplay_graph.backends.triton.lowering import plan_region
    from triton_regions import build

    x, wide = torch.randn(2000, 40), torch.randn(2000, 64)
    (step,) = plan_region(build(PROGRAMS["sum_squares_scaled"], x))
    for t in (x, wide[:, :40], x):  # two specializations: row strides 40 and 64
        got = step.plan(t)[0]
        torch.testing.assert_close(got, (t * t).sum(0) * 0.5, rtol=1e-5, atol=1e-4)
    launches = [spec for (spec, _), *_ in step.plan._specs.values()]
    assert len(launches) == 2 and all(isinstance(s, SplitLaunch) for s in launches)
    for launch in launches:
        (tickets,) = launch._tickets.values()
        assert tickets.shape == (1,) and not tickets.any()


SPLIT_PROGRAMS = {
    "amax": lambda d: (lambda b, x: b.call(torch.amax, x, dim=d)),
    "mean keepdim": lambda d: (lambda b, x: b.call(torch.mean, x, dim=d, keepdim=True)),
    "sum of squares * 0.25 + 1": lambda d: (lambda b, x: b.call(torch.add, b.call(
        torch.mul, b.call(torch.sum, b.call(torch.mul, x, x), dim=d), 0.25), 1.0)),
    "sum and amin": lambda d: (lambda b, x: (b.call(torch.sum, x, dim=d),
                                             b.call(torch.amin, x, dim=d))),
}


@pytest.mark.parametrize("seed", range(6))
def test_random_tall_reductions_split_match_eager_and_repeat(seed):
    """Tall inputs of random shape, row pitch and dtype (the split path: partials combined
    by the last program of each column block) against eager, and bit-equal on a second run."""
    import random
    rng = random.Random(seed)
    rows, cols, mid = rng.choice([2049, 4100]), rng.choice([40, 64, 130]), seed % 3 == 0
    shape, dim = ((2, rows, cols), 1) if mid else ((rows, cols), 0)
    dtype = list(DTYPES)[seed % 3]
    name = list(SPLIT_PROGRAMS)[seed % len(SPLIT_PROGRAMS)]
    x = torch.randn(*shape[:-1], cols + 7 * (seed % 2), dtype=DTYPES[dtype])[..., :cols]
    _, kernel = check_case(BACKEND, SPLIT_PROGRAMS[name](dim), (x,), dtype)
    assert _kind(kernel) == "split", (name, shape, kernel.source)
    first, second = kernel(x), kernel(x)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_middle_dim_with_epilogue_and_full_output():
    """sum over dim 1 of (B, R, C), scaled, plus a per-column bias; the pointwise value
    before the reduction is an output too (stored from inside the loop)."""
    def prog(b, x, bias):
        y = b.call(torch.mul, x, 2.0)
        s = b.call(torch.sum, y, dim=1)
        return y, b.call(torch.add, b.call(torch.mul, s, 3.0), bias)

    x, bias = torch.randn(4, 130, 33), torch.randn(33)
    _, kernel = check_case(BACKEND, prog, (x, bias), "float32")
    assert _kind(kernel) in ("columns", "split")


def test_special_values_propagate():
    x = torch.randn(257, 19)
    x[3, 0], x[100, 1], x[200, 2] = float("nan"), float("inf"), float("-inf")
    x[5, 3], x[6, 3] = float("inf"), float("-inf")
    for name in ("sum0", "amax0", "amin0", "mean0_keepdim"):
        _, kernel = check_case(BACKEND, PROGRAMS[name], (x,), "float32")
        assert _kind(kernel) in ("columns", "split")


def test_integer_sum_accumulates_in_int64():
    x = torch.randint(-2 ** 30, 2 ** 30, (513, 9), dtype=torch.int32)
    program = PROGRAMS["sum0"]
    _, kernel = check_case(BACKEND, program, (x,), "float32")
    got = kernel(x)[0]
    assert got.dtype == torch.int64 and torch.equal(got, x.sum(0))


@pytest.mark.parametrize("shape", [(1, 33), (33, 1), (1, 1), (5, 1, 7)], ids=str)
def test_size_one_dims(shape):
    x = torch.randn(*shape)
    check_case(BACKEND, PROGRAMS["sum0"], (x,), "float32")
    check_case(BACKEND, PROGRAMS["amax0"], (x,), "float32")


MULTI_PASS = {
    # reads the mean back on the row: two loops over it
    "center dim 0": (lambda b, x: b.call(torch.sub, x, b.call(torch.mean, x, dim=0, keepdim=True)), 2),
    "var dim 0": (lambda b, x: b.call(torch.var, x, dim=0), 2),
    "softmax dim 0": (lambda b, x: b.call(torch.softmax, x, dim=0), 3),
    "log_softmax dim 1 of 3-d": (lambda b, x: b.call(torch.log_softmax, x, dim=1), 3),
}


@pytest.mark.parametrize("name", list(MULTI_PASS))
def test_multi_pass_patterns_loop_over_strided_rows(name):
    program, loops = MULTI_PASS[name]
    x = torch.randn(3, 70, 20) if "3-d" in name else torch.randn(130, 20)
    x.view(-1)[7] = float("inf")
    _, kernel = check_case(BACKEND, program, (x,), "float32")
    assert _kind(kernel) == "columns" and f"{loops} loop(s) over the row" in kernel.source


@pytest.mark.parametrize("name,program", [
    ("sum", PROGRAMS["sum_dims01"]),
    ("amax keepdim", lambda b, x: b.call(torch.amax, x, dim=-1, keepdim=True)),
    ("softmax", lambda b, x: b.call(torch.softmax, x, dim=-1)),
])
def test_rows_longer_than_registers_loop(name, program):
    """Contiguous rows past the 32768 elements a rows kernel holds: the looped kernel (a
    whole-tensor sum also splits its one long row)."""
    x = torch.randn(2, 40000, dtype=torch.bfloat16)
    x[1, 123] = float("nan")
    _, kernel = check_case(BACKEND, program, (x,), "bfloat16")
    assert _kind(kernel) in ("columns", "split"), kernel.source


def test_product_path_fuses_the_epilogue_and_declines_empty():
    def fn(x, b):
        return x.sum(0) * 2 + b

    x, b = torch.randn(600, 48, dtype=torch.bfloat16), torch.randn(48, dtype=torch.bfloat16)
    compiled = tpg.compile(fn, backend="triton")
    torch.testing.assert_close(compiled(x, b).float(), fn(x, b).float(), atol=6e-2, rtol=6e-2)
    shape = lowered_summary(compiled)
    assert len(shape["kernels"]) == 1 and not shape["eager"], shape
    plan = tpg.explain(fn, x, b, backend="triton")
    assert "BLOCK_R" in plan.kernels[0].source

    empty = torch.randn(0, 48)
    got = tpg.compile(fn, backend="triton")(empty, b.float())
    torch.testing.assert_close(got, fn(empty, b.float()))
