"""Capture shares the user's tensors as example values unless the program writes in place."""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.frameworks import adapter_for  # noqa: E402


@pytest.fixture
def clones(monkeypatch):
    calls = []
    adapter = adapter_for("torch")
    real = adapter.clone
    monkeypatch.setattr(adapter, "clone", lambda t: calls.append(t) or real(t))
    return calls


class Net(torch.nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(1))
        self.inplace = inplace

    def forward(self, x):
        if self.inplace:
            self.steps.add_(1)
        return torch.relu(self.fc(x)) + self.steps


def test_pure_program_shares_inputs_and_parameters(clones):
    model, x = Net(inplace=False), torch.randn(4, 8)
    gm = tpg.capture(model, x)
    assert clones == []  # no copy of x, the weight, the bias or the buffer
    torch.testing.assert_close(gm(x), model(x))


def test_in_place_program_is_retraced_on_private_copies(clones):
    model, x = Net(inplace=True), torch.randn(4, 8)
    gm = tpg.capture(model, x)
    assert len(clones) >= 2                   # the input and the module state were copied
    assert model.steps.item() == 0.0          # capture did not write into the module
    assert [n.op for n in gm.graph.nodes].count("placeholder") == 1
    expected = Net(inplace=True)
    expected.load_state_dict(model.state_dict())
    torch.testing.assert_close(gm(x), expected(x))
    assert model.steps.item() == 1.0 and expected.steps.item() == 1.0


def test_user_except_clauses_do_not_hide_the_retrace(clones):
    def program(x):
        try:
            x.mul_(2)
        except Exception:  # user code catching broadly must not swallow the retrace
            pass
        return x + 1

    x = torch.ones(3)
    gm = tpg.capture(program, x)
    assert torch.equal(x, torch.ones(3))      # capture left the caller's tensor alone
    assert clones
    y = torch.ones(3)
    torch.testing.assert_close(gm(y), torch.full((3,), 3.0))
