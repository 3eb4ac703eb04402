"""The float64 arbiter of zoo cells: float32 rounding passes, a wrong value still fails."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from .harness import CellResult, Mismatch, _loss, run_cell  # noqa: E402
from .rounding import FACTOR, Float64Reference, within_rounding  # noqa: E402
from .zoo import ModelSpec  # noqa: E402


def _linear() -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3)
    return model, (torch.randn(4, 6, generator=torch.Generator().manual_seed(1)),), {}


SPEC = ModelSpec("linear", "torch", _linear)


def test_the_reference_is_the_model_in_float64():
    reference = Float64Reference(SPEC, True, "cpu", _loss)
    model, (x,), _ = _linear()
    weight, bias, x = model.weight.double(), model.bias.double(), x.double()
    y = x @ weight.T + bias
    assert reference.value("output").dtype == torch.float64
    assert torch.allclose(reference.value("output"), y, rtol=0, atol=1e-12)
    # loss = mean(y * y): d loss / d W = 2 / y.numel() * y^T x, worked out by hand
    expected_grad = 2.0 / y.numel() * y.T @ x
    assert torch.allclose(reference.value("grad[weight]"), expected_grad, rtol=0, atol=1e-12)
    assert reference.value("second call") is None


def test_a_difference_within_eagers_own_rounding_passes():
    exact = torch.tensor([2.0e4, -1.5e4, 3.0], dtype=torch.float64)
    eager = exact + torch.tensor([0.03, -0.02, 0.0], dtype=torch.float64)
    ours = exact + torch.tensor([-0.05, 0.1, 0.0], dtype=torch.float64)
    assert 0.1 <= FACTOR * 0.03
    assert within_rounding(eager.float(), ours.float(), exact, 1e-4) == pytest.approx(
        float((ours.float().double() - eager.float().double()).abs().max()))


@pytest.mark.parametrize("error", [0.5, 1e3, math.nan])
def test_a_value_further_from_float64_than_rounding_fails(error):
    exact = torch.tensor([2.0e4, -1.5e4, 3.0], dtype=torch.float64)
    eager = (exact + torch.tensor([0.03, -0.02, 0.0], dtype=torch.float64)).float()
    ours = eager.clone()
    ours[2] += error
    assert within_rounding(eager, ours, exact, 1e-4) is None


def test_a_wrong_compiled_result_is_still_a_mismatch(monkeypatch):
    """run_cell with a compiler that scales the model's output: the arbiter must not excuse it."""
    from . import harness

    def scaled(spec, entry, backend, model):
        return lambda *args, **kwargs: model(*args, **kwargs) * 1.01

    monkeypatch.setattr(harness, "compile_with", scaled)
    result = run_cell(SPEC, "tpg", "no_grad", "reference")
    assert isinstance(result.error, Mismatch), result.error
    assert result.rounding == []
    assert isinstance(result, CellResult)
