"""Random calls with no traced argument are graph nodes, not constants frozen at capture."""

import pytest

torch = pytest.importorskip("torch")
tp = pytest.importorskip("tensorplay")

import tensorplay_graph as tpg  # noqa: E402


def torch_program(x):
    a = torch.rand(3, 4)
    b = torch.randn(x.shape)
    c = torch.randint(0, 10, (4,))
    d = torch.rand(4, device=x.device)
    return x * a + b, c, d + torch.zeros(4)


def tp_program(x):
    a = tp.rand(3, 4)
    b = tp.randn(x.shape)
    c = tp.randint(0, 10, (4,))
    return x * a + b, c, tp.zeros(4) + 1


FRAMEWORKS = {
    "torch": (torch, torch_program, lambda: torch.randn(3, 4),
              {torch.rand: 2, torch.randn: 1, torch.randint: 1}),
    "tensorplay": (tp, tp_program, lambda: tp.randn(3, 4),
                   {tp.rand: 1, tp.randn: 1, tp.randint: 1}),
}


def as_numpy(value):
    if isinstance(value, (tuple, list)):
        return [as_numpy(v) for v in value]
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value.numpy()


def same(a, b):
    import numpy as np

    a, b = as_numpy(a), as_numpy(b)
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def seeded(fw, fn, *args):
    fw.manual_seed(1234)
    return fn(*args)


@pytest.fixture(params=list(FRAMEWORKS))
def case(request):
    return FRAMEWORKS[request.param]


def test_random_calls_become_nodes_with_meta(case):
    fw, program, make, expected_targets = case
    x = make()
    gm = tpg.capture(program, x)
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in expected_targets]
    counts = {t: sum(n.target is t for n in calls) for t in expected_targets}
    assert counts == expected_targets, gm.graph
    # Only the deterministic zeros may be a constant; no random draw is.
    assert len(gm.graph.find_nodes(op="get_attr")) <= 1
    shapes = sorted(tuple(n.meta["tensor_meta"].shape) for n in calls)
    assert (3, 4) in shapes and (4,) in shapes
    randn = next(n for n in calls if n.target is fw.randn)
    assert type(randn.args[0]) is tuple and randn.args[0] == (3, 4)  # x.shape as a plain tuple
    randint = next(n for n in calls if n.target is fw.randint)
    assert randint.meta["tensor_meta"].dtype == "int64"


def test_graph_module_draws_fresh_values_and_matches_eager_under_seed(case):
    fw, program, make, _ = case
    x = make()
    gm = tpg.capture(program, x)
    first, second = gm(x), gm(x)
    assert not same([first[0]], [second[0]])
    assert same(seeded(fw, gm, x), seeded(fw, program, x))
    assert same(seeded(fw, tpg.Interpreter(gm).run, x), seeded(fw, program, x))


def test_capture_does_not_advance_the_random_stream(case):
    fw, program, make, _ = case
    x = make()
    fw.manual_seed(7)
    tpg.capture(program, x)
    after_capture = fw.rand(5)
    fw.manual_seed(7)
    assert same([after_capture], [fw.rand(5)])


@pytest.mark.parametrize("backend", ["reference", "interpreter"])
def test_compiled_program_is_random_and_seed_matched(case, backend):
    fw, program, make, _ = case
    x = make()
    compiled = tpg.compile(program, backend=backend)
    # The first call captures and lowers: it must not consume random numbers either.
    assert same(seeded(fw, compiled, x), seeded(fw, program, x))
    assert same(seeded(fw, compiled, x), seeded(fw, program, x))
    assert not same([compiled(x)[0]], [compiled(x)[0]])


def test_explain_lists_random_barriers(case):
    fw, program, make, expected_targets = case
    e = tpg.explain(program, make(), backend="reference")
    random = sorted(name for name, code in e.barrier_codes.items() if code == "random")
    assert len(random) == sum(expected_targets.values()), e.barrier_codes
    assert all(name.startswith(("rand", "randn", "randint")) for name in random)


def test_random_call_on_a_constant_tensor_is_a_node():
    weight = torch.ones(3, 4)

    def fn(x):
        return x + torch.rand_like(weight) + torch.nn.functional.dropout(weight, 0.5)
    x = torch.zeros(3, 4)
    gm = tpg.capture(fn, x)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.rand_like in targets and torch.nn.functional.dropout in targets
    assert not same([gm(x)], [gm(x)])
    assert same([seeded(torch, gm, x)], [seeded(torch, fn, x)])


def test_tensorplay_dropout_on_a_proxy_still_records_the_public_function():
    import tensorplay.nn.functional as F

    gm = tpg.capture(lambda x: F.dropout(x, 0.5, True), tp.randn(4, 4))
    assert F.dropout in [n.target for n in gm.graph.nodes]
    assert not hasattr(F.dropout, "_tpg_random_original")  # the patch is restored


@pytest.mark.parametrize("fw,make", [(torch, lambda: torch.randn(3)), (tp, lambda: tp.randn(3))])
def test_deterministic_factories_still_equal_eager(fw, make):
    def fn(x):
        return x + fw.zeros(3) + fw.arange(3) * 2 + fw.ones(3)
    x = make()
    gm = tpg.capture(fn, x)
    assert same([gm(x)], [fn(x)])
    assert same([tpg.compile(fn, backend="reference")(x)], [fn(x)])
