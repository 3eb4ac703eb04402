"""A steady call replays its CUDA graph as soon as the arguments match, and checks the
program's state (module attributes, parameters, globals) while the GPU works; a failed check
drops the replay and the call takes the general path. On the CPU stand-in of
``test_cuda_graphs`` (a replay re-runs the program into the captured buffers)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

from test_cuda_graphs import CpuGraphs, plan_on_cpu  # noqa: E402


class Replays(CpuGraphs):
    count = 0

    @staticmethod
    def replay(graph):
        Replays.count += 1
        CpuGraphs.replay(graph)


class Scaled(torch.nn.Module):
    def __init__(self, norm=False):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.BatchNorm1d(8) if norm else None
        self.scale = 2.0

    def forward(self, x):
        y = self.lin(x)
        if self.norm is not None:
            y = self.norm(y)
        return y.relu() * self.scale


def _steady(monkeypatch, model, x):
    plan_on_cpu(monkeypatch, Replays)
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for _ in range(4):
        assert torch.allclose(compiled(x), model(x))
    spec = next(iter(compiled.specializations.values()))
    runner = getattr(spec.runner, "_lowered", spec.runner)
    assert "graph" in runner.cuda_graphs
    return compiled, spec, runner


@torch.no_grad()
def test_launch_comes_before_the_state_checks(monkeypatch):
    model, x = Scaled(), torch.randn(4, 8)
    compiled, spec, runner = _steady(monkeypatch, model, x)
    assert runner.speculative
    lines = spec.entry.source.splitlines()
    launch = next(i for i, line in enumerate(lines) if "launched = launch" in line)
    state = [i for i, line in enumerate(lines) if ".get(" in line]
    assert state and launch < min(state)
    before = Replays.count
    assert torch.allclose(compiled(x), model(x))
    assert Replays.count == before + 1  # one replay per steady call, as before


@pytest.mark.parametrize("change", ["attribute", "parameter", "module"])
@torch.no_grad()
def test_a_failed_state_check_drops_the_launched_replay(monkeypatch, change):
    model, x = Scaled(), torch.randn(4, 8)
    compiled, spec, runner = _steady(monkeypatch, model, x)
    if change == "attribute":
        model.scale = 3.0
    elif change == "parameter":
        model.lin.weight = torch.nn.Parameter(torch.randn(8, 8))
    else:
        model.lin = torch.nn.Linear(8, 8)
    before = Replays.count
    assert torch.allclose(compiled(x), model(x))  # eager's result under the new state
    assert Replays.count > before  # the old graph was launched, then its results dropped
    assert torch.allclose(compiled(x), model(x))


@torch.no_grad()
def test_held_outputs_are_not_overwritten_by_a_launch(monkeypatch):
    model, x = Scaled(), torch.randn(4, 8)
    compiled, spec, runner = _steady(monkeypatch, model, x)
    kept = compiled(x)
    expected = kept.clone()
    model.scale = 5.0  # the next call fails a state check after its launch would have run
    assert torch.allclose(compiled(x), model(x))
    assert torch.equal(kept, expected)


@torch.no_grad()
def test_no_launch_ahead_for_a_program_that_writes_a_buffer(monkeypatch):
    model, x = Scaled(norm=True), torch.randn(4, 8)
    model.train()  # batch norm updates its running statistics in place
    reference = Scaled(norm=True)
    reference.load_state_dict(model.state_dict())
    reference.train()
    plan_on_cpu(monkeypatch, Replays)
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for _ in range(4):
        compiled(x)
        reference(x)
    spec = next(iter(compiled.specializations.values()))
    runner = getattr(spec.runner, "_lowered", spec.runner)
    if "graph" in getattr(runner, "cuda_graphs", ""):
        assert not runner.speculative
    model.scale = 3.0
    reference.scale = 3.0
    assert torch.allclose(compiled(x), reference(x))
    # a replay launched and dropped would have moved the running mean once more
    assert torch.allclose(model.norm.running_mean, reference.norm.running_mean)
    assert int(model.norm.num_batches_tracked) == int(reference.norm.num_batches_tracked)


def test_training_steps_update_batch_norm_statistics_once_per_step(monkeypatch):
    """A training step's forward graph writes batch norm's running statistics: the capture's
    own run of the program must not count as a step."""
    torch.manual_seed(0)
    model, x = Scaled(norm=True), torch.randn(4, 8)
    reference = Scaled(norm=True)
    reference.load_state_dict(model.state_dict())
    model.train()
    reference.train()
    plan_on_cpu(monkeypatch, Replays)
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for _ in range(5):
        compiled(x).sum().backward()
        reference(x).sum().backward()
    assert int(model.norm.num_batches_tracked) == int(reference.norm.num_batches_tracked)
    torch.testing.assert_close(model.norm.running_mean, reference.norm.running_mean)
    torch.testing.assert_close(model.norm.running_var, reference.norm.running_var)
    torch.testing.assert_close(model.lin.weight.grad, reference.lin.weight.grad)


@torch.no_grad()
def test_a_runner_whose_launch_was_dropped_stops_launching_ahead(monkeypatch):
    """Two states taking turns (one specialization each): without the rule every call would
    replay the other state's graph first and drop it, twice the GPU work."""
    model, x = Scaled(), torch.randn(4, 8)
    compiled, spec, runner = _steady(monkeypatch, model, x)
    for scale in (3.0, 2.0, 3.0, 2.0, 3.0, 2.0):
        model.scale = scale
        assert torch.allclose(compiled(x), model(x))
    specs = list(compiled.specializations.values()) + [
        p for parked in compiled._parked.values() for p in parked]  # the other state's
    runners = [getattr(s.runner, "_lowered", s.runner) for s in specs]
    assert len(runners) == 2 and all("graph" in r.cuda_graphs for r in runners)
    before = Replays.count
    for scale in (3.0, 2.0, 3.0, 2.0):
        model.scale = scale
        assert torch.allclose(compiled(x), model(x))
    assert Replays.count - before == 4  # one replay per call: none launched and dropped
    assert not any(r.speculative for r in runners)


@torch.no_grad()
def test_no_launch_step_in_an_entry_without_a_graph():
    model, x = Scaled(), torch.randn(4, 8)
    compiled = tpg.compile(model, options={"backends": ["reference"]})  # CPU: no CUDA graph
    for _ in range(4):
        assert torch.allclose(compiled(x), model(x))
    spec = next(iter(compiled.specializations.values()))
    assert spec.entry and "launch" not in spec.entry.source


@torch.no_grad()
def test_a_loop_keeping_its_result_launches_the_second_graph_early(monkeypatch):
    model, x = Scaled(), torch.randn(4, 8)
    compiled, spec, runner = _steady(monkeypatch, model, x)
    out = compiled(x)
    history, graphs = [], []
    for step in range(12):
        if step == 9:
            model.scale = 3.0  # a state check fails after a launch of either graph
        previous, value = out, out.clone()
        x = torch.randn(4, 8)
        before = Replays.count
        out = compiled(x)  # the last result is alive during the call
        history.append(Replays.count - before)
        graphs.append(runner.cuda_graphs)
        assert torch.allclose(out, model(x))
        assert torch.equal(previous, value), "the kept result was overwritten"
    # the second graph: a warm-up, one more (x moved since), captured on its third call;
    # from then on the calls alternate between the graphs, each launched ahead of the checks
    assert "a second graph" in graphs[8] and history[6:9] == [1, 1, 1]
    assert runner.speculative and runner._twin.speculative
