"""GEMM choice by measurement (backends/gemm_choice.py): TileLang kernel or cuBLAS + Triton
epilogue, per GEMM key, with an injected timer on this CPU machine."""

import os
import tempfile

import pytest

os.environ.setdefault("TILELANG_CACHE_DIR", tempfile.mkdtemp(prefix="tpg-tilelang-"))
pytest.importorskip("tilelang")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends import gemm_choice  # noqa: E402
from tensorplay_graph.backends.gemm_choice import Candidate, choose  # noqa: E402
from tensorplay_graph.backends.tilelang import TileLangBackend, gemm  # noqa: E402

BF = torch.bfloat16


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Every test starts as a cold process with an empty cache directory."""
    monkeypatch.setenv("TPG_CACHE_DIR", str(tmp_path / "tpg"))
    gemm_choice.forget_in_process()
    yield
    gemm_choice.forget_in_process()


class FakeTimer:
    """Fake device: runs each candidate once (so its build and inputs are exercised) and
    reports the time the test gave it."""

    def __init__(self, ms, run=True):
        self.ms, self.run, self.calls = ms, run, []

    def unavailable(self):
        return None

    def device_name(self):
        return "Fake H200"

    def __call__(self, candidate):
        self.calls.append(candidate.name)
        fn = candidate.kernel()
        if self.run:
            fn(*candidate.make_args())
        return self.ms[candidate.name]


def candidates(log):
    def make(name):
        def build():
            log.append(f"build {name}")
            return lambda *args: None
        return Candidate(name, build, lambda: ())
    return make("cublas"), make("tilelang")


@pytest.mark.parametrize("ms, winner", [({"cublas": 1.0, "tilelang": 2.0}, "cublas"),
                                        ({"cublas": 2.0, "tilelang": 1.5}, "tilelang")])
def test_measure_picks_the_faster_and_keeps_the_timings(ms, winner):
    log = []
    choice = choose(("k", 1), "GEMM 1", "measure", *candidates(log), timer=FakeTimer(ms))
    assert choice.winner == winner
    assert dict(choice.ms) == ms and choice.how == "measured now"
    assert f"cublas {ms['cublas']:.4f} ms" in choice.describe()


def test_a_cached_choice_is_reused_without_measuring_or_building():
    timer = FakeTimer({"cublas": 2.0, "tilelang": 1.0})
    first = choose(("k", 2), "GEMM 2", "measure", *candidates([]), timer=timer)
    assert first.winner == "tilelang" and timer.calls == ["cublas", "tilelang"]
    gemm_choice.forget_in_process()  # a new process: only the file remains
    log, again = [], FakeTimer({})
    second = choose(("k", 2), "GEMM 2", "measure", *candidates(log), timer=again)
    assert second.winner == "tilelang" and again.calls == [] and log == []
    assert second.how == "cached measurement" and dict(second.ms) == dict(first.ms)
    other_gpu = FakeTimer({"cublas": 1.0, "tilelang": 3.0})
    other_gpu.device_name = lambda: "another GPU"  # the device is part of the key
    assert choose(("k", 2), "GEMM 2", "measure", *candidates([]), timer=other_gpu).winner == "cublas"


def test_auto_takes_cublas_without_compiling_tilelang_unless_a_timing_is_cached():
    log, timer = [], FakeTimer({"cublas": 1.0})
    choice = choose(("k", 3), "GEMM 3", "auto", *candidates(log), timer=timer)
    assert choice.winner == "cublas" and timer.calls == [] and log == []
    assert choice.how.startswith("not measured: no TileLang timing cached")
    # an autotuned TileLang time exists: only cuBLAS is timed, TileLang is not built
    timer = FakeTimer({"cublas": 1.0})
    choice = choose(("k", 4), "GEMM 4", "auto", *candidates(log), timer=timer,
                    cached_tilelang_ms=lambda: 0.5)
    assert choice.winner == "tilelang" and timer.calls == ["cublas"] and log == ["build cublas"]
    assert dict(choice.ms) == {"cublas": 1.0, "tilelang": 0.5}


def test_fixed_policies_and_an_unavailable_candidate_do_not_measure():
    timer = FakeTimer({})
    for policy in ("cublas", "tilelang"):
        choice = choose(("k", 5), "GEMM 5", policy, *candidates([]), timer=timer)
        assert choice.winner == policy and "not measured" in choice.how
    cublas, tilelang = candidates([])
    cublas.unavailable = "Triton declines epilogue node x"
    choice = choose(("k", 6), "GEMM 6", "measure", cublas, tilelang, timer=timer)
    assert choice.winner == "tilelang" and "Triton declines" in choice.how and timer.calls == []


def test_unknown_policy_fails_at_once_with_the_valid_list():
    with pytest.raises(ValueError, match="'auto', 'measure', 'cublas', 'tilelang'"):
        tpg.compile(lambda a, b: a @ b, options={"gemm": "fastest"})


@pytest.fixture
def fake_tilelang(monkeypatch):
    """TileLang compiles counted (none can run on this CPU machine)."""
    compiled = []
    monkeypatch.setattr(gemm, "_BUILT", {})
    monkeypatch.setenv("TPG_TILELANG_COMPILE_THREADS", "1")

    def fake_compile(source, key, n_params, label):
        compiled.append(key)
        return lambda *args: (_ for _ in ()).throw(RuntimeError("no GPU here"))
    monkeypatch.setattr(gemm, "_compile_program", fake_compile)
    return compiled


def matmul_only(a, b):
    return torch.matmul(a, b)


def _compiled(policy, timer):
    return tpg.compile(matmul_only, backend="tilelang", options={
        "gemm": policy, "cuda_graphs": False,
        "backend_options": {"tilelang": {"device": "cuda", "timer": timer}}})


def test_a_losing_tilelang_kernel_is_not_compiled_in_a_warm_process(fake_tilelang):
    a, b = torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF)
    cold = _compiled("measure", FakeTimer({"cublas": 1.0, "tilelang": 2.0}, run=False))
    torch.testing.assert_close(cold(a, b), matmul_only(a, b), rtol=0, atol=0)  # eager's matmul
    assert len(fake_tilelang) == 1            # built once, for the race
    assert ("region 0: GEMM 128x128x256 bfloat16 matmul +0 epilogue op(s): cublas (cublas 1.0000 "
            "ms, tilelang 2.0000 ms; measured now)") in cold.explain()
    gemm.__dict__["_BUILT"].clear()
    gemm_choice.forget_in_process()           # a warm process: the choice comes from disk
    warm_timer = FakeTimer({})
    warm = _compiled("measure", warm_timer)
    torch.testing.assert_close(warm(a, b), matmul_only(a, b), rtol=0, atol=0)
    assert len(fake_tilelang) == 1 and warm_timer.calls == []
    assert "cached measurement" in warm.explain()


def test_a_winning_tilelang_kernel_is_the_one_lowered(fake_tilelang):
    from tensorplay_graph.passes.pipeline import compile_graph
    a, b = torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF)
    backend = TileLangBackend(device="cuda", gemm="measure",
                              timer=FakeTimer({"cublas": 3.0, "tilelang": 1.0}, run=False))
    module = compile_graph(tpg.capture(matmul_only, a, b), (a, b), backends=[backend])
    (kernel,) = [n.meta["kernel"] for n in module.graph.nodes if "kernel" in n.meta]
    assert [k["kind"] for k in kernel.launch["kernels"]] == ["gemm"]
    assert "T.gemm(A_shared, B_shared, C_local)" in kernel.source
    assert "tilelang (cublas 3.0000 ms, tilelang 1.0000 ms; measured now)" in kernel.launch["gemm"][0]
    assert len(fake_tilelang) == 1            # the race's build is the kernel's: one compile


def test_explain_shows_the_choice_per_gemm():
    a, b = torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF)
    text = str(tpg.explain(matmul_only, a, b, gemm="cublas"))
    assert "GEMM 128x128x256 bfloat16 matmul +0 epilogue op(s): cublas (not measured: " \
           "options['gemm'] is 'cublas')" in text
    text = str(tpg.explain(matmul_only, a, b))  # default policy; no GPU here to measure on
    assert "cublas (not measured: no CUDA device in this process)" in text


def test_measure_starts_every_tilelang_build_before_the_first_race(fake_tilelang, monkeypatch):
    monkeypatch.setenv("TPG_TILELANG_COMPILE_THREADS", "4")
    from tensorplay_graph.passes.pipeline import compile_graph

    def two_gemms(a, b, c, d):
        return a @ b, c @ d

    args = (torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF),
            torch.randn(256, 64, dtype=BF), torch.randn(64, 128, dtype=BF))
    submitted = []

    class Spy(FakeTimer):
        def __call__(self, candidate):
            submitted.append(len(gemm._BUILT))
            return super().__call__(candidate)

    backend = TileLangBackend(device="cuda", gemm="measure",
                              timer=Spy({"cublas": 1.0, "tilelang": 2.0}, run=False))
    compile_graph(tpg.capture(two_gemms, *args), args, backends=[backend])
    assert submitted[0] == 2 and len(fake_tilelang) == 2  # both queued before any timing


class PointwiseFirst:
    """Stands in for Triton on this CPU machine: claims every pointwise node, no matmul."""

    name = "pointwise_first"

    def supports(self, node):
        prim = node.meta.get("prim")
        return None if prim is not None and prim.kind == "pointwise" else "pointwise only"

    def compile(self, region):  # planning only
        raise NotImplementedError


class NoBuildTimer(FakeTimer):
    def __call__(self, candidate):
        self.calls.append(candidate.name)
        return self.ms[candidate.name]


def test_planning_gives_a_gemm_its_epilogue_only_where_tilelang_may_run_it(fake_tilelang,
                                                                           monkeypatch):
    from tensorplay_graph.passes.partition import regions_from_meta
    from tensorplay_graph.passes.pipeline import plan_graph
    args = (torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF),
            torch.randn(128, dtype=BF))

    def fn(a, b, bias):
        return torch.relu(a @ b + bias)

    def plan(policy, timer):
        backend = TileLangBackend(device="cuda", gemm=policy, timer=timer)
        gm, _ = plan_graph(tpg.capture(fn, *args), args, backends=[PointwiseFirst(), backend])
        return [(r.backend, r.names) for r in regions_from_meta(gm)], backend

    timer = FakeTimer({"cublas": 2.0, "tilelang": 1.0}, run=False)
    apart = [("tilelang", ["matmul"]), ("pointwise_first", ["add", "relu"])]
    together = [("tilelang", ["matmul", "add", "relu"])]
    assert plan("cublas", timer)[0] == apart
    assert plan("auto", timer)[0] == apart      # nothing measured yet: cuBLAS, epilogue apart
    assert plan("measure", timer)[0] == together
    assert plan("tilelang", timer)[0] == together
    # a race TileLang won for this GEMM (with its epilogue) is stored ... (Triton cannot
    # build the cuBLAS candidate's epilogue outside its interpreter: this timer builds nothing)
    from tensorplay_graph.backends.tilelang import choice
    from tensorplay_graph.passes.pipeline import compile_graph
    monkeypatch.setattr(choice, "unavailable", lambda nodes: None)
    racing = TileLangBackend(device="cuda", gemm="measure", timer=NoBuildTimer(timer.ms))
    compile_graph(tpg.capture(fn, *args), args, backends=[PointwiseFirst(), racing])
    assert racing.timer.calls == ["cublas", "tilelang"]
    gemm_choice.forget_in_process()
    assert plan("auto", FakeTimer({}))[0] == together   # ... so "auto" plans it for TileLang
