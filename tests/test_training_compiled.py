"""Training through our own capture: the compiled forward / backward pair equals eager.

A training step (forward, loss, backward) with a registered custom op (``register_autograd``)
in the middle, through ``tensorplay_graph.compile`` and ``tp.compile(backend=
"tensorplay_graph")`` (TensorPlay) and ``tensorplay_graph.compile`` (torch): the loss and
every gradient equal eager's; ``.grad`` accumulates, ``retain_graph`` runs a second backward,
``no_grad`` calls record nothing; ``explain()`` shows the lowered backward. A prim without a
VJP rule makes the program train through eager autograd, with the reason shown.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_graph as tpg
from tensorplay_graph import prims
from tensorplay_graph.library import custom_op
from tensorplay_graph.training import compiled_programs, programs_built, programs_since

OPTIONS = {"backends": ["reference"]}
_OPS = {}


def _np(t):
    t = t.detach()
    return t.numpy() if type(t).__module__.startswith("torch") else np.asarray(t.numpy())


def _close(a, b, what):
    np.testing.assert_allclose(_np(a), _np(b), rtol=1e-5, atol=1e-6, err_msg=what)


def _soft_clip(fw):
    """``<fw>::train_soft_clip``: tanh(x / limit) * limit with its registered backward."""
    if fw.__name__ not in _OPS:
        @custom_op(f"train_{fw.__name__}::soft_clip", mutates_args=())
        def soft_clip(x: fw.Tensor, limit: float) -> fw.Tensor:
            return fw.tanh(x / limit) * limit

        @soft_clip.register_fake
        def _(x, limit):
            return fw.empty_like(x)

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.limit = inputs[1]

        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            t = fw.tanh(x / ctx.limit)
            return grad * (1 - t * t), None

        soft_clip.register_autograd(backward, setup_context=setup_context)
        _OPS[fw.__name__] = soft_clip
    return _OPS[fw.__name__]


def _model(fw):
    nn = fw.nn
    fw.manual_seed(0)
    op = _soft_clip(fw)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)

        def forward(self, x, target):
            h = op(fw.nn.functional.gelu(self.norm(self.fc1(x))), 2.0) * 1.5
            logits = self.fc2(fw.sigmoid(h) * h)
            loss = ((logits - target) ** 2).mean()
            return loss - fw.log_softmax(logits, dim=-1).mean() * 0.1
    return Net()


def _inputs(fw):
    fw.manual_seed(1)
    return fw.randn(6, 8, requires_grad=True), fw.randn(6, 4)


def _grads(model, x):
    found = {name: p.grad.clone() for name, p in model.named_parameters()}
    found["x"] = x.grad.clone()
    return found


def _zero(model, x):
    for p in model.parameters():
        p.grad = None
    x.grad = None


def _step_matches_eager(fw, compiled, model, x, target):
    loss = model(x, target)
    loss.backward()
    expected = _grads(model, x)
    _zero(model, x)
    for step in range(2):  # the second call runs the already lowered pair
        got_loss = compiled(x, target)
        _close(got_loss, loss, f"loss (call {step})")
        got_loss.backward()
        for name, grad in _grads(model, x).items():
            _close(grad, expected[name], f"grad {name} (call {step})")
        _zero(model, x)
    return expected


def _frameworks():
    out = []
    for name in ("tensorplay", "torch"):
        try:
            out.append(pytest.param(__import__(name), id=name))
        except ImportError:  # pragma: no cover - the suite installs both
            pass
    return out


@pytest.mark.parametrize("fw", _frameworks())
def test_training_step_equals_eager_through_tpg_compile(fw):
    model, (x, target) = _model(fw), _inputs(fw)
    compiled = tpg.compile(model, options=OPTIONS)
    expected = _step_matches_eager(fw, compiled, model, x, target)
    text = compiled.explain()
    assert "forward and backward compiled through our joint graph" in text
    assert f"train_{fw.__name__}::soft_clip" in text  # the custom op: one opaque node
    backward = [line for line in text.splitlines() if "backward:" in line]
    assert backward and "0 fused" not in backward[0], text

    # .grad accumulates over two backward passes; retain_graph allows the second one
    loss = compiled(x, target)
    loss.backward(retain_graph=True)
    loss.backward()
    for name, grad in _grads(model, x).items():
        _close(grad, expected[name] * 2, f"accumulated grad {name}")
    _zero(model, x)

    with fw.no_grad():
        quiet = compiled(x, target)
    assert not quiet.requires_grad
    _close(quiet, model(x, target), "no_grad loss")


def test_training_step_equals_eager_through_tp_compile():
    tp = pytest.importorskip("tensorplay")
    model, (x, target) = _model(tp), _inputs(tp)
    before = programs_built()
    compiled = tp.compile(model, backend="tensorplay_graph", options=OPTIONS)
    _step_matches_eager(tp, compiled, model, x, target)
    built = [p for p in programs_since(before) if p.compiled_by != "AOTAutograd"]
    assert built and built[-1].eager_reason is None
    text = built[-1].explain()
    assert "train_tensorplay::soft_clip" in text and "backward:" in text
    assert built[-1].regions("backward"), text  # the backward graph was lowered and fused


def test_prim_without_vjp_rule_trains_through_eager_autograd(monkeypatch):
    tp = pytest.importorskip("tensorplay")
    monkeypatch.setattr(prims.get("sigmoid"), "vjp", None)
    model, (x, target) = _model(tp), _inputs(tp)
    compiled = tpg.compile(model, options=OPTIONS)
    _step_matches_eager(tp, compiled, model, x, target)
    text = compiled.explain()
    assert "runs through eager autograd" in text and "prim sigmoid" in text
    assert "has no VJP rule" in text


def test_opaque_ops_release_what_they_saved_once_backward_ran():
    torch = pytest.importorskip("torch")
    model, (x, target) = _model(torch), _inputs(torch)
    compiled = tpg.compile(model, options=OPTIONS)
    kept = compiled(x, target)
    kept.backward(retain_graph=True)   # eager keeps the graph: so do the opaque ops' tapes
    spent = compiled(x, target)
    spent.backward()                   # eager frees what backward saved: so do we
    compiled(x, target)                # the next forward drops spent tapes
    assert kept.grad_fn.others, "a retained graph lost its opaque ops' tapes"
    assert spent.grad_fn.others is None
    kept.backward()                    # the retained graph still runs


def test_min_cut_recomputes_pointwise_chains_instead_of_saving_them():
    torch = pytest.importorskip("torch")
    from tensorplay_graph.capture import capture
    from tensorplay_graph.training.joint import build_joint
    from tensorplay_graph.training.mincut import split_joint

    def f(x, w):
        return (torch.tanh(torch.exp(torch.sin(x) * 2.0)) @ w).sum()

    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    split = split_joint(build_joint(capture(f, x, w), (x, w)))
    # every VJP of the chain reads an intermediate; saving the chain's input (and w) is
    # cheaper than saving them, so the backward recomputes sin / exp / tanh
    assert set(split.saved) == {"x", "w"}, split.saved
    assert {"sin", "exp", "tanh"} <= set(split.recomputed), split.recomputed
    # the report lists what is saved, largest first, in bytes as torch stores it
    assert split.saved_sizes == [("x", x.numel() * 4, "8x16 float32"),
                                 ("w", w.numel() * 4, "16x4 float32")]


def test_training_mode_dropout_draws_as_eager_and_trains_compiled():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Dropout(0.5),
                              torch.nn.Linear(32, 4)).train()
    x = torch.randn(6, 8)

    def step(fn):
        torch.manual_seed(123)  # the same mask when the draws happen in the same order
        out = fn(x)
        out.square().mean().backward()
        grads = {n: p.grad.clone() for n, p in net.named_parameters()}
        net.zero_grad(set_to_none=True)
        return out.detach(), grads

    want_out, want = step(net)
    compiled = tpg.compile(net, options=OPTIONS)
    for _ in range(2):
        got_out, got = step(compiled)
        _close(got_out, want_out, "output")
        for name in want:
            _close(got[name], want[name], f"grad {name}")
    assert "compiled through our joint graph" in compiled.explain()
    assert "largest saved: " in compiled.explain()


@pytest.mark.parametrize("fw", _frameworks())
def test_gradients_that_share_a_buffer_accumulate_apart(fw):
    # Fuzz seed 99860063: the backward of ``x.unsqueeze(0) + y`` is one buffer for y and a view
    # of it for x; handed over as they were, torch's AccumulateGrad moved both into .grad
    # uncopied, and the second backward of a retained graph added into both twice (3x).
    def program(x, y):
        return x.unsqueeze(0) + y

    rng = np.random.default_rng(0)
    grads = {}
    for name, fn in (("eager", program), ("compiled", tpg.compile(program, options=OPTIONS))):
        x = fw.from_numpy(rng.standard_normal((8, 3)).astype(np.float32)).requires_grad_(True)
        y = fw.from_numpy(rng.standard_normal((1, 8, 3)).astype(np.float32)).requires_grad_(True)
        loss = (fn(x, y) * fw.from_numpy(np.arange(24, dtype=np.float32).reshape(1, 8, 3))).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        grads[name] = (x.grad, y.grad)
    for want, got, what in zip(grads["eager"], grads["compiled"], ("x.grad", "y.grad")):
        _close(got, want, what)


@pytest.mark.parametrize("fw", _frameworks())
def test_an_empty_cat_piece_still_passes_a_zero_gradient(fw):
    # Grad fuzz seed 99760248: ``cat([y, x.var(dim=0)[1:], y])`` with one row in the variance:
    # the empty piece (1-d: eager's cat skips it) still connects x, so eager's x.grad is zeros
    # and ours was None. Also an empty piece of a 2-d cat.
    def flat(x, y):
        return fw.cat([y, x.var(dim=0)[1:], y], dim=0)

    def wide(x, y):
        return fw.cat([y.reshape(2, 1), x.reshape(2, 2)[:, 2:]], dim=1)

    rng = np.random.default_rng(0)
    for program, shape in ((flat, (4, 1)), (wide, (4,))):
        grads = {}
        for name, fn in (("eager", program), ("compiled", tpg.compile(program, options=OPTIONS))):
            x = fw.from_numpy(rng.standard_normal(shape).astype(np.float32)).requires_grad_(True)
            y = fw.from_numpy(rng.standard_normal(2).astype(np.float32)).requires_grad_(True)
            fn(x, y).sum().backward()
            grads[name] = x.grad
        assert grads["compiled"] is not None, program.__name__
        _close(grads["compiled"], grads["eager"], program.__name__)


def test_an_empty_parameter_returned_through_contiguous_is_the_parameter():
    # Grad fuzz seed 99750605: NumPy's empty arrays come with strides of 0, which our meta
    # called non-contiguous, so ``p.contiguous()`` stayed a node and returned a new tensor
    # where eager returns the parameter itself.
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.from_numpy(np.zeros((0, 1), np.float32)))

        def forward(self):
            return self.p.contiguous()

    net = Net()
    assert net.p.stride() == (0, 0) and net() is net.p
    assert tpg.compile(net, options=OPTIONS)() is net.p


def test_a_transposed_weights_gradient_has_the_weights_layout():
    # x @ W.t(): the backward graph computes W's gradient in W's layout, as eager's mm backward
    # does (it follows the transposed operand's layout); ours was the transpose of a row-major
    # product, copied into W's layout after the backward (0.48 ms for GPT-2's LM head, H200)
    import torch

    from tensorplay_graph.backends.triton.compile_sweep import training_halves
    x, w = torch.randn(5, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True)
    (_, _, _), (_, backward, args) = training_halves(lambda x, w: (x @ w.t()).relu().sum(), x, w)
    grad_x, grad_w = backward(*args)
    assert grad_w.shape == w.shape and grad_w.is_contiguous(), grad_w.stride()
    compiled = [t.detach().clone().requires_grad_() for t in (x, w)]
    (x @ w.t()).relu().sum().backward()
    tpg.compile(lambda x, w: (x @ w.t()).relu().sum())(*compiled).backward()
    for want, got, name in zip((x, w), compiled, "xw"):
        _close(got.grad, want.grad, f"{name}.grad")
