"""Python-level random draws inside a compiled program (``capture/host_random.py``): a graph
would freeze the capture's draw, so such programs go to the framework's frontend (torch:
Dynamo; TensorPlay: eager), and every call draws what eager draws from the same seed. Before,
``x * random.random()`` returned the capture's value on every call."""

from __future__ import annotations

import random

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}
RNG = random.Random(0)
NP_RNG = np.random.default_rng(0)


def values(t):
    return np.asarray(t.tolist())


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    RNG.seed(seed)
    NP_RNG.bit_generator.state = np.random.default_rng(seed).bit_generator.state


PROGRAMS = {
    "random.random": lambda x: x * random.random(),
    "numpy.random.rand": lambda x: x + float(np.random.rand()),
    "a held random.Random": lambda x: x * RNG.uniform(1.0, 2.0),
    "a held numpy Generator": lambda x: x - float(NP_RNG.normal()),
    "a draw in a branch": lambda x: x * 2.0 if random.random() < 0.5 else x.relu(),
}


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_each_call_draws_as_eager_does(fw, name):
    lib = FRAMEWORKS[fw]
    program = PROGRAMS[name]
    x = lib.ones(4) * -0.5
    seed_all(1)
    want = [values(program(x)) for _ in range(4)]
    seed_all(1)
    compiled = tpg.compile(program)
    got = [values(compiled(x)) for _ in range(4)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert "Python-level random generator" in compiled.explain()


@pytest.mark.parametrize("fw", sorted(FRAMEWORKS))
def test_a_program_that_draws_nothing_stays_captured_and_leaves_the_generators(fw):
    lib = FRAMEWORKS[fw]
    before = (random.getstate(), np.random.get_state()[1].copy())
    compiled = tpg.compile(lambda x: (x * 2.0).relu())
    x = lib.ones(3)
    for _ in range(2):
        np.testing.assert_allclose(values(compiled(x)), [2.0] * 3)
    assert compiled.frontend == "tensorplay_graph"
    assert random.getstate() == before[0]
    np.testing.assert_array_equal(np.random.get_state()[1], before[1])
