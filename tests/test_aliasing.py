"""Aliasing and mutation: compiled == eager for programs whose values share memory.

CSE / DCE must not merge or drop across an in-place write; a no-op cast (``x.float()``
on float32, ``.to(same)``, ``.int()`` on int32, ``type_as``, ``contiguous()``) and a view
return an alias in eager, so a later write through either name is seen through both.
Each case runs on torch and TensorPlay, compiled by every CPU backend, against eager.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorplay as tp
import torch

import tensorplay_graph as tpg
from tensorplay_graph.passes.cleanup import cse
from tensorplay_graph.passes.normalize import normalize

BACKENDS = ["interpreter", "reference", "auto"]
FRAMEWORKS = {"torch": torch, "tensorplay": tp}


def as_numpy(value):
    if isinstance(value, (tuple, list)):
        return [as_numpy(v) for v in value]
    return np.asarray(value.detach().numpy() if hasattr(value, "detach") else value.numpy())


def check(program, make_inputs, backend):
    """Compiled and eager agree on outputs and on the inputs after the call, twice."""
    compiled = tpg.compile(program, backend=backend)
    for _ in range(2):
        inputs, eager_inputs = make_inputs(), make_inputs()
        out, expected = compiled(*inputs), program(*eager_inputs)
        for got, want in zip(as_numpy([out, *inputs]), as_numpy([expected, *eager_inputs])):
            for g, w in zip(got if isinstance(got, list) else [got],
                            want if isinstance(want, list) else [want]):
                assert g.dtype == w.dtype and g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def cse_then_mutate(m):
    def program(x):
        a = x + 1
        b = x + 1
        b.mul_(10)
        return a, b
    return program


def cse_then_mutate_view(m):
    def program(x):
        a = x * 2
        b = x * 2
        b.view(-1).add_(1)
        return a, b
    return program


def cast_input_then_write(m):
    def program(x):
        y = x.float()
        y.add_(1)
        return y * 2
    return program


def to_same_then_write_base(m):
    def program(x):
        y = x.to(m.float32)
        x.mul_(3)
        return y + 0
    return program


def int_cast_then_write(m):
    def program(i):
        j = i.int()
        j.add_(5)
        return i * 2
    return program


def type_as_then_write(m):
    def program(x):
        y = x.type_as(x)
        y.sub_(1)
        return x * 1
    return program


def contiguous_of_intermediate(m):
    def program(x):
        h = x * 2
        c = h.contiguous()
        c.add_(1)
        return h + 1, c
    return program


def cast_of_intermediate(m):
    def program(x):
        h = x - 1
        y = h.float()
        y.mul_(-1)
        return h * 3
    return program


def view_read_after_base_write(m):
    def program(x):
        v = x.reshape(-1)
        x.add_(1)
        return v * 1
    return program


def flatten_merging_nothing_then_write(m):
    def program(x):
        h = x * 2
        f = h.flatten(1, 1)  # no dims merge: h itself in eager
        f.add_(1)
        g = h.reshape(-1).flatten()  # 1-D: itself
        g.mul_(2)
        return h + 0, f, g
    return program


FLOAT_CASES = [cse_then_mutate, cse_then_mutate_view, cast_input_then_write,
               to_same_then_write_base, type_as_then_write, contiguous_of_intermediate,
               cast_of_intermediate, view_read_after_base_write,
               flatten_merging_nothing_then_write]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_flatten_merging_nothing_returns_its_input_itself(fw, backend):
    # grad seed 71001381: a 1-D parameter's flatten() is the Parameter itself in eager
    m = FRAMEWORKS[fw]
    x, y = m.arange(6, dtype=m.float32), m.arange(6, dtype=m.float32).reshape(2, 3)
    compiled = tpg.compile(lambda x, y: (x.flatten(), y.flatten(-1, -1), y.flatten()),
                           backend=backend)
    got = compiled(x, y)
    assert got[0] is x and got[1] is y and got[2] is not y


def test_a_parameter_flattened_to_itself_is_returned_itself_in_training():
    # grad seed 71001381: the joint graph made `w.flatten()` of a 1-D parameter a new tensor,
    # where torch returns the Parameter itself. (TensorPlay 1.0.0 returns a new TensorBase on
    # the parameter's memory for flatten / float / contiguous of a Parameter; compiled code
    # returns the Parameter, as for its no-op casts: FINDINGS.md.)
    m = torch

    class Net(m.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = m.nn.Parameter(m.arange(4, dtype=m.float32))

        def forward(self, x):
            return self.w.flatten(), (self.w * x).sum()

    net, x = Net(), m.ones(4)
    flat, loss = tpg.compile(net, backend="reference")(x)
    loss.backward()
    assert flat is net.w
    np.testing.assert_array_equal(as_numpy(net.w.grad), np.ones(4, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
@pytest.mark.parametrize("case", FLOAT_CASES, ids=lambda c: c.__name__)
def test_writes_through_aliases_match_eager(case, fw, backend):
    m = FRAMEWORKS[fw]
    check(case(m), lambda: (m.arange(6, dtype=m.float32).reshape(2, 3),), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_int_cast_on_int32_aliases(fw, backend):
    m = FRAMEWORKS[fw]
    check(int_cast_then_write(m), lambda: (m.arange(6, dtype=m.int32),), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_returned_alias_of_input_is_an_alias(fw, backend):
    """The caller writing into the result reaches the input, as in eager."""
    m = FRAMEWORKS[fw]

    def program(x):
        return x.float(), x.reshape(-1)

    compiled = tpg.compile(program, backend=backend)
    for run in (compiled, program):
        x = m.zeros(2, 3)
        same, flat = run(x)
        same.add_(1)
        flat.add_(2)
        np.testing.assert_allclose(as_numpy(x), np.full((2, 3), 3.0))


def test_cse_keeps_nodes_whose_alias_is_written():
    gm = normalize(tpg.capture(cse_then_mutate_view(torch), torch.ones(3)))
    assert cse(gm) == 0
    pure = normalize(tpg.capture(lambda x: (x * 2, x * 2), torch.ones(3)))
    assert cse(pure) == 1  # still merges where nothing is written


def test_noop_cast_is_folded_to_its_input_and_a_real_cast_is_not():
    gm = normalize(tpg.capture(lambda x: (x.float() * 2, x.half() * 2), torch.ones(3)))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_method"]
    assert targets == ["half"]


def test_opaque_prims_with_fresh_results_alias_nothing():
    # conv / pooling / a loss return new tensors: returned to the caller they are no alias of
    # an input (explain said "cross_entropy returns an alias of its input"); eval dropout is
    import torch.nn.functional as F

    from tensorplay_graph.ir.aliases import is_aliasing_node
    from tensorplay_graph.passes.barriers import aliasing_nodes

    def f(x, w, t):
        return (F.conv2d(x, w), F.max_pool2d(x, 2), F.cross_entropy(x.flatten(1), t),
                F.dropout(x, training=False))
    x, w, t = torch.randn(2, 3, 4, 4), torch.randn(5, 3, 3, 3), torch.randint(0, 48, (2,))
    gm = tpg.capture(f, x, w, t)
    normalize(gm)
    by_prim = {n.meta["prim"].name: n for n in gm.graph.nodes if n.meta.get("prim")}
    for name in ("conv2d", "max_pool2d", "cross_entropy"):
        assert not is_aliasing_node(by_prim[name]), name
    assert set(aliasing_nodes(gm.graph)) == {by_prim["dropout"]}
