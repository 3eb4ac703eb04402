"""F27 (tests/models/FINDINGS.md): TensorPlay 1.0.0's ``autograd.Function.apply`` stops
recording for the whole process when the first Function it ever applies is given a tensor
subclass (an ``nn.Parameter``). Our compiled training applies its Function to a module's
parameters, so a process whose first training call was compiled lost every later gradient,
eager ones too. The TensorPlay adapter primes ``apply`` with a plain tensor first, and a
process that was already broken gets an error instead of a result without gradients.

Each case runs in a fresh process: the state is settled by the process's first apply."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorplay")

HERE = os.path.dirname(os.path.abspath(__file__))

PRELUDE = textwrap.dedent(f"""
    import sys
    sys.path[:0] = [{HERE!r}, {os.path.dirname(HERE)!r}]
    import tensorplay as tp

    class Neg(tp.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return -a

        @staticmethod
        def backward(ctx, g):
            return -g

    def records():
        x = tp.randn(3)
        x.requires_grad_(True)
        return Neg.apply(x).requires_grad
""")


def run(body: str) -> list:
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_subclass_first_breaks_tensorplay_apply():
    """The defect itself, in plain TensorPlay: if this starts passing, TensorPlay fixed it
    and the priming can go."""
    assert run("""
        print(Neg.apply(tp.nn.Parameter(tp.randn(2))).requires_grad, records())
    """) == ["False", "False"]


def test_fuzz_seed_100830000_leaves_apply_recording():
    """The program that found it: a module whose output is a view of its parameter,
    trained through ``tp.compile(backend="tensorplay_graph")`` as the process's first apply."""
    out = run("""
        import tensorplay_graph
        from grad_gen import generate_grad
        from grad_check import check_grad
        print(check_grad(generate_grad(100830000, "tensorplay"), "framework").status, records())
    """)
    assert out[-2:] == ["ok", "True"]


def test_compiled_module_training_first_in_process():
    """Gradients of a compiled module equal eager's when its call is the first apply."""
    out = run("""
        import numpy as np
        import tensorplay_graph as tpg

        class Net(tp.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = tp.nn.Parameter(tp.randn(3, 3))

            def forward(self):  # the parameter is the apply's first tensor
                return (self.w * 2.0).tanh().flatten()

        net = Net()
        compiled = tpg.compile(net, backend="reference")
        cot = tp.randn(9)
        (compiled() * cot).sum().backward()
        got = net.w.grad.numpy().copy()
        net.w.grad = None
        (net() * cot).sum().backward()
        print(np.allclose(got, net.w.grad.numpy(), rtol=1e-5, atol=1e-6), records())
    """)
    assert out == ["True", "True"]


def test_already_broken_process_raises_instead_of_losing_gradients():
    out = run("""
        Neg.apply(tp.nn.Parameter(tp.randn(2)))  # the user's own first apply breaks it
        import tensorplay_graph as tpg

        class Net(tp.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = tp.nn.Parameter(tp.randn(3))

            def forward(self, x):
                return x * self.w

        try:
            tpg.compile(Net(), backend="reference")(tp.randn(3))
            print("returned")
        except RuntimeError as exc:
            print("raised", "nn.Parameter" in str(exc) and "prime_function_apply" in str(exc))
    """)
    assert out == ["raised", "True"]


def test_custom_op_backward_on_a_parameter_first_in_process():
    """A custom op with ``register_autograd`` applied eagerly to a Parameter, as the
    process's first apply: its registered backward runs and later applies still record."""
    out = run("""
        from tensorplay_graph.library import custom_op

        @custom_op("tpg_f27::scale", mutates_args=())
        def scale(x: tp.Tensor) -> tp.Tensor:
            return x * 3.0

        @scale.register_fake
        def _(x):
            return tp.empty_like(x)

        scale.register_autograd(lambda ctx, grad: grad * 3.0 + 1.0,
                                setup_context=lambda ctx, inputs, output: None)
        w = tp.nn.Parameter(tp.ones(2))
        scale(w).sum().backward()
        print(w.grad.numpy().tolist() == [4.0, 4.0], records())
    """)
    assert out == ["True", "True"]
