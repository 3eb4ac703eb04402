"""Parameters, buffers, closure and global tensors are read at call time; replacing them is seen."""

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def assert_close(got, want):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)


def make_model(lib):
    nn = lib.nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = nn.Embedding(8, 4)
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            # pos.weight * 2 depends on parameters only: it must not be frozen at capture
            return self.fc(x) + self.pos.weight[: x.shape[0]] * 2

    return Model()


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_parameters_behind_a_closure_follow_in_place_updates(fw):
    lib = FRAMEWORKS[fw]
    model, x = make_model(lib), lib.randn(3, 4)
    compiled = tpg.compile(lambda x: model(x))
    assert_close(compiled(x), model(x))
    with lib.no_grad():
        model.pos.weight.add_(1.0)
        model.fc.bias.mul_(-3.0)
    assert_close(compiled(x), model(x))
    assert compiled.captures == 1                 # an in-place update needs no recapture


def test_sgd_steps_and_repeated_backward_through_a_closure():
    model, x = make_model(torch), torch.randn(3, 4)
    compiled = tpg.compile(lambda x: model(x))
    reference = make_model(torch)
    reference.load_state_dict(model.state_dict())
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference))
    for _ in range(3):
        for m, f, o in ((model, compiled, opt), (reference, reference, ref_opt)):
            o.zero_grad()
            f(x).square().sum().backward()        # a second backward must work too
            o.step()
    assert_close(compiled(x), reference(x))
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p, q)


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_replaced_parameter_buffer_and_submodule_are_seen(fw):
    lib = FRAMEWORKS[fw]
    model, x = make_model(lib), lib.randn(3, 4)
    compiled = tpg.compile(model)
    with lib.no_grad():
        assert_close(compiled(x), model(x))
        model.fc.weight = lib.nn.Parameter(lib.randn(4, 4))
        assert_close(compiled(x), model(x))
        assert "weight" in compiled.recompile_reasons[-1]
        model.fc = lib.nn.Linear(4, 4)
        assert_close(compiled(x), model(x))
        assert "fc" in compiled.recompile_reasons[-1]


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_replaced_buffer_is_seen(fw):
    lib = FRAMEWORKS[fw]

    class WithBuffer(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", lib.ones(4))

        def forward(self, x):
            return x * self.scale.exp()

    model, x = WithBuffer(), lib.randn(4)
    compiled = tpg.compile(lambda x: model(x))
    assert_close(compiled(x), model(x))
    model.scale = lib.full((4,), 2.0)
    assert_close(compiled(x), model(x))


GLOBAL_TABLE = None


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_rebound_global_and_closure_tensors_are_seen(fw):
    global GLOBAL_TABLE
    lib = FRAMEWORKS[fw]
    GLOBAL_TABLE = lib.randn(4)
    offset = lib.randn(4)

    def program(x):
        return x * GLOBAL_TABLE.exp() + offset.abs()   # exp/abs of state: recorded, not frozen

    compiled = tpg.compile(program)
    x = lib.randn(4)
    assert_close(compiled(x), program(x))
    GLOBAL_TABLE.mul_(2.0)                         # in place: read at call time
    assert_close(compiled(x), program(x))
    GLOBAL_TABLE = lib.randn(4)                    # rebound: the guard sees it
    assert_close(compiled(x), program(x))
    assert "GLOBAL_TABLE" in compiled.recompile_reasons[-1]
    offset = lib.randn(4)                          # noqa: F841 -- rebinding the closure cell
    assert_close(compiled(x), program(x))
    assert "closure" in compiled.recompile_reasons[-1]


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_tied_weights_are_one_attribute(fw):
    lib = FRAMEWORKS[fw]
    nn = lib.nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight      # as GPT-2 ties lm_head to wte

        def forward(self, ids):
            return self.head(self.embed(ids))

    model, ids = Tied(), lib.tensor([[1, 2, 3]])
    compiled = tpg.compile(model)
    with lib.no_grad():
        assert_close(compiled(ids), model(ids))
    graph = next(iter(compiled.specializations.values())).captured.graph
    assert len(graph.find_nodes(op="get_attr")) == 1
    assert compiled.frontend == "tensorplay_graph"
