"""torch.compile training through AOTAutograd: forward and backward graphs are lowered.

Every gradient is compared with torch's own eager autograd on the same module.
"""

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tensorplay_graph.library import custom_op  # noqa: E402
from tensorplay_graph.training import compiled_programs, programs_built, programs_since  # noqa: E402

BACKWARD_CALLS = [0]


# The registered backward is deliberately NOT the kernel's derivative (x*k -> g*k + 1):
# gradients equal to eager prove the registered formula ran, not the kernel traced.
@custom_op("tpg_training_test::scale", mutates_args=())
def scale(x: torch.Tensor, k: float = 3.0) -> torch.Tensor:
    return x * k


@scale.register_fake
def _(x, k=3.0):
    return torch.empty_like(x)


def _scale_backward(ctx, grad):
    BACKWARD_CALLS[0] += 1
    return grad * ctx.k + 1.0, None


def _scale_setup(ctx, inputs, output):
    ctx.k = inputs[1]


scale.register_autograd(_scale_backward, setup_context=_scale_setup)


@torch.library.custom_op("tpg_training_test::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    return x ** 3


@cube.register_fake
def _(x):
    return torch.empty_like(x)


cube.register_autograd(lambda ctx, g: g * 2.0 * ctx.saved_tensors[0],   # also not x**3's derivative
                       setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))


class Block(nn.Module):
    """Pre-norm attention + GELU MLP with residuals: a transformer-ish block."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


def mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 8), nn.LayerNorm(8), nn.ReLU())


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


def grads(model, fn, x, steps=1):
    """Loss, input grad and parameter grads after ``steps`` backward passes (grads accumulate)."""
    x = x.clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    for _ in range(steps):
        loss = fn(x)
        loss.backward()
    return [loss.detach(), x.grad] + [p.grad.clone() for p in model.parameters()]


def assert_grads_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "auto", "tilelang"])
def test_mlp_gradients_equal_eager_and_backward_is_fused(backend):
    if backend == "tilelang":
        pytest.importorskip("tilelang")
    model = mlp()
    loss = lambda x: (model(x) * 2.0).sum()  # noqa: E731
    compiled = torch.compile(loss, backend="tensorplay_graph", options={"backends": backend})
    x = torch.randn(6, 8)
    assert_grads_equal(grads(model, compiled, x), grads(model, loss, x))
    program = compiled_programs()[-1]
    assert program.eager_reason is None
    assert set(program.runners) == {"forward", "backward"}
    if backend == "reference":
        backward = program.regions("backward")
        assert backward and all(r.backend == "reference" for r in backward)
        assert "backward:" in program.explain()


def test_transformer_block_gradients_equal_eager():
    block = Block()
    loss = lambda x: block(x).pow(2).mean()  # noqa: E731
    compiled = torch.compile(loss, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = torch.randn(2, 5, 16)
    assert_grads_equal(grads(block, compiled, x), grads(block, loss, x))
    assert compiled_programs()[-1].regions("backward")


class Rotary(nn.Module):
    """Llama's pattern: pointwise work on a transposed view, transposed back and reshaped.
    AOTAutograd turns the reshape into a view valid for eager's (permuted) strides only."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        b, t, h, d = x.shape
        q = (x @ self.w).transpose(1, 2)
        q = q * 2.0 + q.sin()
        return q.transpose(1, 2).reshape(b, t, h * d).pow(2).mean()


def test_views_of_fused_outputs_with_another_layout_still_work():
    model = Rotary()
    compiled = torch.compile(model, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = torch.randn(2, 5, 3, 8)
    assert_grads_equal(grads(model, compiled, x), grads(model, model, x))
    assert compiled_programs()[-1].regions("forward")


def test_grad_accumulates_over_two_steps_as_in_eager():
    model = mlp()
    loss = lambda x: model(x).sum()  # noqa: E731
    compiled = torch.compile(loss, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = torch.randn(4, 8)
    got, want = grads(model, compiled, x, steps=2), grads(model, loss, x, steps=2)
    assert_grads_equal(got, want)
    one = grads(model, loss, x, steps=1)
    torch.testing.assert_close(got[2], 2 * one[2])  # accumulated, not overwritten


def test_retain_graph_behaves_as_in_eager():
    model = mlp()
    compiled = torch.compile(lambda x: model(x).sum(), backend="tensorplay_graph",
                             options={"backends": ["reference"]})
    x = torch.randn(4, 8, requires_grad=True)
    out = compiled(x)
    out.backward(retain_graph=True)
    first = x.grad.clone()
    out.backward()
    torch.testing.assert_close(x.grad, 2 * first)
    out = compiled(x)
    out.backward()
    with pytest.raises(RuntimeError):
        out.backward()  # the saved tensors were freed, as in eager


def test_gradients_that_share_a_buffer_accumulate_apart():
    # The backward of ``x.unsqueeze(0) + y`` returns one buffer for y and a view of it for x;
    # AOTAutograd hands both to AccumulateGrad, which moved them into .grad uncopied, and the
    # second backward of a retained graph added into both twice (torch.compile's own default
    # backend gives 3x too; eager 2x).
    def program(x, y):
        return x.unsqueeze(0) + y

    weights = torch.arange(24.0).reshape(1, 8, 3)
    found = []
    for fn in (program, torch.compile(program, backend="tensorplay_graph",
                                      options={"backends": ["reference"]})):
        torch.manual_seed(0)
        x, y = torch.randn(8, 3, requires_grad=True), torch.randn(1, 8, 3, requires_grad=True)
        loss = (fn(x, y) * weights).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        found.append((x.grad, y.grad))
    assert_grads_equal(found[1], found[0])

def test_no_grad_takes_the_inference_path():
    model = mlp()
    fn = lambda x: model(x).sum()  # noqa: E731
    compiled = torch.compile(fn, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = torch.randn(4, 8)
    before = programs_built()
    with torch.no_grad():
        out = compiled(x)
    assert not out.requires_grad
    torch.testing.assert_close(out, fn(x))
    assert programs_built() == before  # no training program was built


def test_custom_ops_with_register_autograd_stay_opaque_and_use_their_formula():
    model = mlp()
    loss = lambda x: cube(scale(model(x), 2.0).sin()).sum()  # noqa: E731
    compiled = torch.compile(loss, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = torch.randn(4, 8)
    assert_grads_equal(grads(model, compiled, x), grads(model, loss, x))
    program = compiled_programs()[-1]
    assert program.bridged == ["tpg_training_test::scale"]
    forward = program.graphs["forward"].graph.nodes
    assert [n.target for n in forward if n.target is scale]           # one opaque node: ours
    assert [n for n in forward if "cube" in str(n.target)]            # and torch's
    assert "tpg_training_test::scale" in "".join(program.barriers("forward").values())
    # compiled: both steps' gradients came from the registered formula
    assert_grads_equal(grads(model, compiled, x, steps=2), grads(model, loss, x, steps=2))


def test_op_without_autograd_differentiates_through_its_kernel_as_in_eager():
    @custom_op("tpg_training_test::soft_square", mutates_args=())
    def soft_square(x: torch.Tensor) -> torch.Tensor:
        return x * x.detach().abs() + torch.sin(x)   # eager autograd sees these torch ops

    @soft_square.register_fake
    def _(x):
        return torch.empty_like(x)

    model = mlp()
    loss = lambda x: soft_square(model(x)).sum()  # noqa: E731
    compiled = torch.compile(loss, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = torch.randn(4, 8)
    assert_grads_equal(grads(model, compiled, x), grads(model, loss, x))
    program = compiled_programs()[-1]
    assert program.eager_reason is None and program.bridged == []


def test_triton_op_without_autograd_runs_eager_autograd_with_the_reason():
    from tensorplay_graph.library import triton_op

    @triton_op("tpg_training_test::plain_triton", mutates_args=())
    def plain(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0   # stands in for a kernel launch: the op is declared a triton_op

    @plain.register_fake
    def _(x):
        return torch.empty_like(x)

    model = mlp()
    loss = lambda x: plain(model(x)).sum()  # noqa: E731
    compiled = torch.compile(loss, backend="tensorplay_graph", options={"backends": ["reference"]})
    x = torch.randn(4, 8)
    assert_grads_equal(grads(model, compiled, x), grads(model, loss, x))
    reason = compiled_programs()[-1].explain()
    assert "plain_triton is a triton_op without register_autograd" in reason


def test_opcheck_aot_dispatch_compiles_a_training_call_through_aot_autograd():
    from tensorplay_graph.library import opcheck

    @custom_op("tpg_training_test::gated", mutates_args=())
    def gated(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(y)

    @gated.register_fake
    def _(x, y):
        return torch.empty_like(x)

    def backward(ctx, g):
        x, y = ctx.saved_tensors
        s = torch.sigmoid(y)
        return g * s, g * x * s * (1 - s)

    gated.register_autograd(backward, setup_context=lambda ctx, inputs, output:
                            ctx.save_for_backward(*inputs))
    before = programs_built()
    assert opcheck(gated, (torch.randn(3, 4), torch.randn(3, 4)),
                   test_utils="test_aot_dispatch_dynamic") == {}
    built = programs_since(before)
    assert built and built[-1].bridged == ["tpg_training_test::gated"]
    assert set(built[-1].runners) == {"forward", "backward"}


def test_programs_since_counts_past_the_bounded_list():
    # opcheck's AOT check looks for the program its call built; with 64+ programs recorded in
    # the process (a long test session), the bounded list stops growing and a length-based
    # lookup found nothing.
    from tensorplay_graph.training.aot import programs_built, programs_since, record_program
    from tensorplay_graph.training.report import TrainingProgram
    for _ in range(70):
        record_program(TrainingProgram(name="filler"), "filler")
    before = programs_built()
    fresh = TrainingProgram(name="fresh")
    record_program(fresh, "graph")
    assert programs_since(before) == [fresh]
    assert fresh.name == f"graph_{before}"
    assert programs_since(programs_built()) == []
