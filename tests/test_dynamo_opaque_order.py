"""A custom op stays one opaque node under ``torch.compile`` whatever loaded first.

An op defined before Dynamo is imported can only be marked ``allow_in_graph`` once Dynamo
is loaded. If ``tensorplay_graph.compile`` ran first (importing our compiler while Dynamo
was absent), Dynamo used to inline ``CustomOpDef.__call__``, break the graph at the op and
feed its output to the next graph as an input: an in-place write into that output then gave
NaN gradients (gradient fuzzer, torch seed 100728). Runs in a fresh interpreter: Dynamo's
import state is per process.
"""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

SCRIPT = textwrap.dedent('''
    import sys
    import torch
    import tensorplay_graph as tpg
    from tensorplay_graph.library import custom_op
    from tensorplay_graph.training import compiled_programs

    @custom_op("order::gaffine", mutates_args=())
    def gaffine(x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s + 1.0

    @gaffine.register_fake
    def _(x, s):
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.s = inputs[1]

    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.s + x * 0.125, None

    gaffine.register_autograd(backward, setup_context=setup)

    def program(x):
        y = gaffine(x, 2.0)
        z = gaffine(x, 3.0)
        z.mul_(float("inf"))  # z never reaches the loss: eager's x.grad stays finite
        return (y * x).sum()

    def grad_of(fn):
        x = torch.linspace(-1.0, 1.0, 6).requires_grad_(True)
        fn(x).backward()
        return x.grad

    assert "torch._dynamo" not in sys.modules
    want = grad_of(program)
    assert torch.equal(grad_of(tpg.compile(program, backend="reference")), want)
    got = grad_of(torch.compile(program, backend="tensorplay_graph", fullgraph=True))
    assert torch.isfinite(got).all(), got
    assert torch.allclose(got, want), (got, want)
    assert "order::gaffine" in compiled_programs()[-1].bridged
    print("ok")
''')


def test_op_defined_before_dynamo_stays_opaque_after_tpg_compile():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
