"""TileLang C target: eager's dtype and special-value rules, truthful supports(), cache safety.

Each program runs with ``TPG_STRICT_LOWERING=1``: a region the backend claims but
cannot compile fails the test instead of quietly running eagerly.
"""

import ctypes
import logging
import os
import shutil
import tempfile

import pytest

os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))

tilelang = pytest.importorskip("tilelang")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.tilelang import cache  # noqa: E402
from tensorplay_graph.passes.pipeline import compile_graph  # noqa: E402

SPECIAL = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.5, -2.5, 3.0])
N = 8192  # 8 specials x 8192 = 65536 elements: enough for the CPU claim


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TPG_STRICT_LOWERING", "1")


def _compiled(fn, *args):
    gm = compile_graph(tpg.capture(fn, *args), args, backends=["tilelang"])
    kernels = [n for n in gm.graph.nodes if n.meta.get("kernel") is not None]
    assert kernels and all(n.meta["kernel"].backend == "tilelang" for n in kernels)
    return gm


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == torch.bool:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-6, atol=1e-6)


def special_program(x, y, m):
    """Every construct issue 13 found crashing or wrong on the C target, in one region."""
    div_bool = (-1 / (x >= y)) * 2 + x             # true division of a bool: -inf, not -1
    absolute = (x * 2).abs() + 1 - x                # fabs is missing on the C target
    where_in = torch.where(m, x, y) * 2 + 1         # a bool *input*
    neg_inf = torch.where(x > 0, x, float("-inf")) * 2 + 1
    by_zero = (x * 2 + 1) / 0 - x                   # literal division by zero
    bool_add = ((x > 0) + (y > 0)) * x + 1          # bool + bool stays bool (logical or)
    unused = x * 3 + 1 - y                          # noqa: F841 - a dead value in the region
    nan_ops = torch.relu(x) * 2 + torch.maximum(x, y) - torch.clamp(x, -1.0, 2.0)
    return div_bool, absolute, where_in, neg_inf, by_zero, bool_add, nan_ops


def test_special_values_and_dtypes_match_torch_eager():
    x, y = SPECIAL.repeat(N), SPECIAL.roll(3).repeat(N)
    m = torch.arange(x.numel()) % 3 == 0
    gm = _compiled(special_program, x, y, m)
    for got, want in zip(gm(x, y, m), special_program(x, y, m)):
        _same(got, want)


def test_tensorplay_bool_true_division_promotes_to_float():
    tp = pytest.importorskip("tensorplay")
    x, y = tp.randn(256, 256), tp.randn(256, 256)

    def prog(x, y):
        return (-1 / (x >= y)) * 2 + x, ((x > 0) + (y > 0)) * x + 1

    gm = _compiled(prog, x, y)
    for got, want in zip(gm(x, y), prog(x, y)):
        _same(torch.from_dlpack(got), torch.from_dlpack(want))


def test_floor_division_is_declined_not_approximated():
    x = torch.randn(256, 256)
    e = tpg.explain(lambda x: torch.div(x * 2 + 1, 0.1, rounding_mode="floor") - x, x,
                    backend="tilelang", compile_kernels=False)
    assert "floor" in str(e.declined)


def test_nan_constant_is_declined_with_reason():
    x = torch.randn(256, 256)
    e = tpg.explain(lambda x: torch.where(x > 0, x, float("nan")) * 2 + 1, x, backend="tilelang",
                    compile_kernels=False)
    assert "NaN constant" in str(e.declined)


@pytest.mark.parametrize("prog", [
    lambda x: ((x * 7e37 + 3e38) - 3e38) * 2,  # reassociated (eager: inf for x = 1.5)
    lambda x: ((x + 1e30) - 1e30) * 2,        # reassociated to x * 2 (eager: 0 for small x)
], ids=["overflow", "absorbed"])
def test_tir_does_not_reassociate_step_values(prog):
    x = SPECIAL.repeat(N)
    gm = _compiled(prog, x)
    _same(gm(x), prog(x))


def test_auto_on_cpu_runs_eagerly_and_matches():
    x, y = SPECIAL.repeat(N), SPECIAL.roll(3).repeat(N)
    m = torch.arange(x.numel()) % 3 == 0
    f = tpg.compile(special_program)
    for got, want in zip(f(x, y, m), special_program(x, y, m)):
        _same(got, want)


def test_compile_failure_runs_region_eagerly_with_warning(monkeypatch, caplog):
    from tensorplay_graph.backends.tilelang.backend import TileLangBackend

    monkeypatch.delenv("TPG_STRICT_LOWERING")

    def broken(self, region):
        raise RuntimeError("toolchain exploded")

    monkeypatch.setattr(TileLangBackend, "compile", broken)
    x, y = torch.randn(256, 256), torch.randn(256, 256)

    def prog(x, y):
        return (x * y + 1) * 2 - y

    with caplog.at_level(logging.WARNING, logger="tensorplay_graph.passes.lower"):
        got = tpg.compile(prog, backend="tilelang")(x, y)
    _same(got, prog(x, y))
    assert any("toolchain exploded" in r.message for r in caplog.records if r.levelname == "WARNING")
    text = str(tpg.explain(prog, x, y, backend="tilelang"))
    assert "runs eagerly" in text and "toolchain exploded" in text


# ----------------------------------------------------------------------------- the .so cache

C_SOURCE = 'extern "C" int answer() {{ return {value}; }}\n'


def _build(value, key):
    return cache.build_shared_library(C_SOURCE.format(value=value), key, [], ["-O0"])


def _answer(path):
    # A copy under a fresh name: dlopen returns the handle already loaded for a path.
    fresh = os.path.join(tempfile.mkdtemp(), "lib.so")
    shutil.copy(path, fresh)
    return ctypes.CDLL(fresh).answer()


@pytest.mark.parametrize("damage", ["truncated", "empty", "other_kernel"])
def test_damaged_so_entry_is_rebuilt(damage, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    key = f"test_{damage}"
    lib = _build(41, key)
    data = lib.read_bytes()
    if damage == "truncated":
        lib.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        lib.write_bytes(b"")
    else:
        lib.write_bytes(_build(7, key + "_other").read_bytes())
    with caplog.at_level(logging.WARNING):
        again = _build(41, key)
    assert again == lib and again.read_bytes() == data and _answer(again) == 41
    assert any("checksum" in r.message for r in caplog.records)


def test_unwritable_cache_dir_falls_back_to_private_temp_dir(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.WARNING):
        lib = _build(5, "test_unwritable")
    assert _answer(lib) == 5 and not str(lib).startswith(str(blocker))
    assert any("not writable" in r.message for r in caplog.records)


def test_tilelangs_own_info_lines_stay_quiet_unless_asked(monkeypatch):
    import logging
    from tensorplay_graph.backends.tilelang import cache
    monkeypatch.setattr(cache, "_QUIETED", False)
    logging.getLogger("tilelang").setLevel(logging.INFO)   # what ``import tilelang`` sets
    cache.load_tilelang()
    assert logging.getLogger("tilelang").level == logging.WARNING
    monkeypatch.setattr(cache, "_QUIETED", False)
    logging.getLogger("tilelang").setLevel(logging.INFO)
    monkeypatch.setattr(logging.getLogger("tensorplay_graph.compile"), "level", logging.DEBUG)
    cache.load_tilelang()                                   # asked for: TileLang keeps INFO
    assert logging.getLogger("tilelang").level == logging.INFO


def test_clamp_keeps_the_sign_of_zero_and_nan_bounds():
    def program(x, lo):
        kept = torch.ceil(x).clamp(min=0)     # an output of a region that goes on with it
        return kept, kept * 2.0 - x, torch.clamp(x * 2, min=lo) + 0.5 - x
    x = SPECIAL.repeat(N) * -0.25          # ceil(-0.375) is -0.0: eager's clamp keeps it
    lo = SPECIAL.roll(1).repeat(N)         # includes NaN bounds
    gm = _compiled(program, x, lo)
    for got, want in zip(gm(x, lo), program(x, lo)):
        _same(got, want)
        finite = ~torch.isnan(want)
        assert torch.equal(torch.signbit(got[finite]), torch.signbit(want[finite]))


def test_tensorplay_clamp_of_bool_is_declined_and_matches():
    tp = pytest.importorskip("tensorplay")

    def program(x):
        flag = x > -3.0
        return (flag.clamp(min=-1.0, max=2.0), x * 2.0 + 1.0 - x)  # TensorPlay: always True

    x = tp.randn(256, 256)
    plan = tpg.explain(program, x, backend="tilelang")
    assert any("clamp of a bool tensor" in str(reason) for reason in plan.barriers.values())
    for got, want in zip(tpg.compile(program, backend="tilelang")(x), program(x)):
        assert str(got.dtype) == str(want.dtype) and bool((got == want).all())


def test_bool_compared_with_an_int_scalar_follows_each_frameworks_eager(monkeypatch):
    """fuzz tensorplay/tilelang seed 5000368: TensorPlay's ``bool_x >= -1`` is ``bool_x >= True``
    (torch's keeps -1). A graph of operators does not name its framework: declined, not guessed.
    Seed 5001312: TensorPlay's ``bool_x + -1`` is bool, computed as ``bool_x + True``."""
    tp = pytest.importorskip("tensorplay")
    monkeypatch.delenv("TPG_STRICT_LOWERING")

    def prog(x):
        return ((x > 0) >= -1) * 2.0 + x - 1, ((x < 1) == 2) * 3.0 - x * 2, ((x > 0) + -1) * 2.0 - x

    xt = SPECIAL.repeat(N)
    for x, to_torch in ((xt, lambda t: t), (tp.from_dlpack(xt.clone()), torch.from_dlpack)):
        e = tpg.explain(prog, x, backend="tilelang", compile_kernels=False)
        assert "does not say which framework" in str(e.declined)
        for got, want in zip(tpg.compile(prog, backend="tilelang")(x), prog(x)):
            _same(to_torch(got), to_torch(want))


def test_tensorplay_minimum_maximum_ties_keep_eagers_operand():
    """fuzz tensorplay/tilelang seed 7000079: on 0.0 vs -0.0 TensorPlay's minimum keeps its
    second operand and maximum its first (C's fmin / fmax pick either): signs of zero match."""
    tp = pytest.importorskip("tensorplay")
    zx = torch.tensor([0.0, -0.0, 0.0, -0.0, float("nan"), 1.0, -0.0, 2.0]).repeat(N)
    zy = torch.tensor([-0.0, 0.0, 0.0, -0.0, 0.0, float("nan"), 3.0, -0.0]).repeat(N)

    def prog(x, y):
        a = tp.minimum(x, y)
        c = tp.maximum(y, x)
        return a, tp.maximum(a, x), c, tp.minimum(c, a)

    x, y = tp.from_dlpack(zx.clone()), tp.from_dlpack(zy.clone())
    gm = _compiled(prog, x, y)
    for got, want in zip(gm(x, y), prog(x, y)):
        got, want = torch.from_dlpack(got), torch.from_dlpack(want)
        _same(got, want)
        assert torch.equal(torch.signbit(got) | got.isnan(), torch.signbit(want) | want.isnan())
