"""CUDA graphs for compiled training, on the CPU: the forward and backward programs of a
step replay through ``CudaGraphRunner`` (the CPU stand-in of ``tests/test_cuda_graphs.py``)
and every step's loss and gradients still equal eager's -- saved activations handed from the
forward graph's buffers to the backward, gradients handed to ``.grad``, a retained graph.
"""

from __future__ import annotations

import logging
import re

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

from test_cuda_graphs import CpuGraphs, plan_on_cpu  # noqa: E402
from test_training_functional import F, TinyLM, _data, _grads, eager_step  # noqa: E402


@pytest.fixture
def cpu_graphs(monkeypatch):
    """Graphs planned for CPU tensors and replayed by the CPU stand-in."""
    plan_on_cpu(monkeypatch, CpuGraphs)


def test_training_step_replays_both_programs_with_eager_gradients(cpu_graphs):
    model, (ids, labels), want_loss, want = eager_step()
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for step in range(4):  # warm-up, capture, then replays
        loss = compiled(ids, labels)
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
        loss.backward()
        del loss
        for name, grad in _grads(model).items():
            torch.testing.assert_close(grad, want[name], rtol=1e-5, atol=1e-6,
                                       msg=f"{name} (step {step})")
    text = compiled.explain()
    assert text.count("cuda graphs on:") == 2 and text.count("[graph") == 2, text


def test_accumulated_gradients_and_retained_graphs_stay_eager_like(cpu_graphs):
    model, (ids, labels), _, want = eager_step()
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for _ in range(2):
        compiled(ids, labels).backward()
        model.zero_grad(set_to_none=True)
    # .grad kept across steps (the backward graph's last outputs are now the user's)
    for _ in range(3):
        compiled(ids, labels).backward()
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, want[name] * 3, rtol=1e-5, atol=1e-5, msg=name)
    kept = compiled(ids, labels)
    kept.backward(retain_graph=True)
    compiled(ids, labels).backward()  # a new step while the old graph's saved values live
    kept.backward()
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, want[name] * 3, rtol=1e-5, atol=1e-5, msg=name)


def test_backward_graph_reads_saved_activations_in_place(cpu_graphs, caplog):
    """The backward is captured once its inputs stopped moving: the saved activations are
    the forward graph's own output buffers, read in place, not copied in before each replay
    (a copy of every activation per step, and as much memory again, on the H200)."""
    torch.manual_seed(0)
    model, (ids, labels) = TinyLM(), _data()
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    with caplog.at_level(logging.INFO, logger="tensorplay_graph.compile"):
        for _ in range(5):
            compiled(ids, labels).backward()
    captured = [r.getMessage() for r in caplog.records if "cuda graphs: captured" in r.getMessage()]
    copied = [int(re.search(r"(\d+) copied in", m).group(1)) for m in captured]
    assert copied == [0, 1], captured  # forward: none; backward: the loss's incoming gradient


def _recorded_runners(monkeypatch):
    from tensorplay_graph.backends import cuda_graphs
    runners = []

    class Recorded(cuda_graphs.CudaGraphRunner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            runners.append(self)

    monkeypatch.setattr(cuda_graphs, "CudaGraphRunner", Recorded)
    return runners


def _tiny_lm_and_eager_grads():
    """A TinyLM, its data, eager's gradients of one step, and the model compiled."""
    model, (ids, labels), _, want = eager_step()
    return model, (ids, labels), want, tpg.compile(model, options={"backends": ["reference"]})


@pytest.mark.parametrize("hold", [False, True])
def test_gradients_go_to_grad_without_a_copy(cpu_graphs, monkeypatch, hold):
    """The backward graph's gradient buffers become ``.grad`` themselves (autograd takes an
    unshared gradient as is; otherwise a copy of every gradient per step, and as much memory
    again). Gradients the caller keeps (``hold``) are never overwritten by a later step: the
    graph's outputs are copied out from then on."""
    runners = _recorded_runners(monkeypatch)
    model, (ids, labels), want, compiled = _tiny_lm_and_eager_grads()
    kept = []
    for _ in range(5):
        model.zero_grad(set_to_none=True)
        compiled(ids, labels).backward()
        if hold:
            kept.append({n: p.grad for n, p in model.named_parameters()})
    backward = [r for r in runners if r.replays][-1]
    buffers = {o.untyped_storage().data_ptr() for o in backward._outputs.values if torch.is_tensor(o)}
    in_buffers = [p.grad.untyped_storage().data_ptr() in buffers for p in model.parameters()]
    if hold:
        assert backward.state.startswith("graph, copying") and not any(in_buffers)
    else:
        assert backward.state == "graph, memory pool shared across the training step" and \
            all(in_buffers)
    for step, grads in enumerate(kept + [{n: p.grad for n, p in model.named_parameters()}]):
        for name, grad in grads.items():
            torch.testing.assert_close(grad, want[name], rtol=1e-5, atol=1e-6, msg=f"{name} {step}")


@pytest.mark.parametrize("zero_grad", ["before forward", "after forward"])
def test_forward_and_backward_share_one_pool_while_no_gradient_is_held(
        cpu_graphs, monkeypatch, caplog, zero_grad):
    """The backward graph is captured into the forward's memory pool, so its gradients lie
    where the forward writes its intermediates (the stand-in overwrites them with NaN on every
    forward replay). With gradients dropped before the forward, both keep sharing; with
    ``zero_grad`` after the forward, last step's ``.grad`` is still held when the forward
    runs: the forward leaves the pool (a private capture) and no gradient is overwritten."""
    runners = _recorded_runners(monkeypatch)
    model, (ids, labels), want, compiled = _tiny_lm_and_eager_grads()
    with caplog.at_level(logging.INFO, logger="tensorplay_graph.perf_hints"):
        for step in range(6):
            if zero_grad == "before forward":
                model.zero_grad(set_to_none=True)
            loss = compiled(ids, labels)
            if zero_grad == "after forward":
                model.zero_grad(set_to_none=True)
            loss.backward()
            for name, p in model.named_parameters():
                torch.testing.assert_close(p.grad, want[name], rtol=1e-5, atol=1e-6,
                                           msg=f"{name} (step {step})")
    forward, backward = [r for r in runners if r.replays]
    shared = "memory pool shared across the training step"
    left = [r for r in caplog.records if "shared memory pool are still held" in r.getMessage()]
    # the loop's ``loss`` outlives the next call: that one output is copied, no activation
    assert forward.state.startswith("graph, copying 1 of ")
    if zero_grad == "before forward":
        assert forward.state.endswith(shared) and backward.state.endswith(shared)
        assert not left
    else:
        assert not forward.state.endswith(shared) and backward.state.endswith(shared)
        assert len(left) == 1


class WithLogits(TinyLM):
    """Returns the logits too, as transformers' models do; the loss alone is differentiated."""

    def __init__(self):
        super().__init__()
        del self.qkv

    def forward(self, ids, labels):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        logits = self.head(self.norm(h)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1)), logits


class WithPiece(WithLogits):
    """Also returns half the logits (a ``split`` piece, a view) that no loss term reads: its
    gradient is scattered into the logits' and accumulated by an add -- a structural zero."""

    def forward(self, ids, labels):
        loss, logits = super().forward(ids, labels)
        return loss, logits, logits.split(4, dim=1)[1]


@pytest.mark.parametrize("model_class", [WithLogits, WithPiece])
def test_unused_outputs_gradients_are_no_inputs(cpu_graphs, caplog, monkeypatch, model_class):
    """Eager runs no backward for an output the loss did not use: the backward specialized for
    the used outputs has no input for the logits' gradient (no zero tensor of the logits' size
    made and read per step)."""
    from tensorplay_graph.training.step import CompiledTraining
    zeros = []
    make = CompiledTraining.zeros
    monkeypatch.setattr(CompiledTraining, "zeros",
                        lambda self, meta: zeros.append(tuple(meta.shape)) or make(self, meta))
    torch.manual_seed(0)
    model, (ids, labels) = model_class(), _data()
    model(ids, labels)[0].backward()
    want = _grads(model)
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    with caplog.at_level(logging.INFO, logger="tensorplay_graph.compile"):
        for _ in range(5):
            out = compiled(ids, labels)
            out[0].backward()
            del out
            for name, grad in _grads(model).items():
                torch.testing.assert_close(grad, want[name], rtol=1e-5, atol=1e-6, msg=name)
    captured = [r.getMessage() for r in caplog.records if "cuda graphs: captured" in r.getMessage()]
    copied = [int(re.search(r"(\d+) copied in", m).group(1)) for m in captured]
    if model_class is WithLogits:
        assert copied == [0, 1], captured  # no zero gradient among the copies
    assert zeros == []


def test_warm_ups_allocate_from_the_step_pool_until_a_graph_is_captured(monkeypatch):
    """The first step's warm-ups (forward and backward) run in the training step's graph pool,
    so their freed intermediates are blocks the captures reuse, not default-pool segments a
    block kept from a warm-up pins; a warm-up after the pool's first capture (the backward's
    second, once the forward's capture moved its inputs) runs in the default pool, where
    nothing it keeps can lie in blocks that graph overwrites."""
    seen = []

    class Recording(CpuGraphs):
        @staticmethod
        def warm_up(fn, args, pool=None):
            seen.append(("warm-up", pool))
            return fn(*args)

        @staticmethod
        def capture(fn, args, pool=None):
            seen.append(("capture", pool))
            return CpuGraphs.capture(fn, args, pool=pool)

    plan_on_cpu(monkeypatch, Recording)
    model, (ids, labels), want_loss, want = eager_step()
    compiled = tpg.compile(model, options={"backends": ["reference"]})
    for _ in range(4):
        model.zero_grad(set_to_none=True)
        loss = compiled(ids, labels)
        loss.backward()
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grad, want[name], rtol=1e-5, atol=1e-6, msg=name)
    kinds = [kind for kind, _ in seen]
    first_capture = kinds.index("capture")
    pool = seen[first_capture][1]
    assert pool is not None and all(p is pool for kind, p in seen if kind == "capture"), seen
    assert kinds[:2] == ["warm-up", "warm-up"] and seen[0][1] is pool and seen[1][1] is pool, seen
    assert all(p is None for kind, p in seen[first_capture:] if kind == "warm-up"), seen
    assert "warm-up" in kinds[first_capture:], "the backward warms up again after the forward's capture"
