"""Property: random small programs with in-place writes give eager's results when compiled.

Seeded programs over two (4, 4) float32 inputs mix pure ops (``a + b``, ``a * 0.5``,
``relu``), aliases (``a.t()``, ``a.view(4, 4)``, ``a.float()``) and in-place writes on
inputs and intermediates (``add_``, ``relu_``, ``mul_``, ``a[1:3] = v``). Every compiled
result, and every input after the call, must equal eager's: mutating nodes keep their
order relative to every reader and writer of the same memory (DESIGN invariant).
``TPG_PROPERTY_PROGRAMS`` raises the number of programs for a long run.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import tensorplay as tp
import torch

import tensorplay_graph as tpg

BACKENDS = ["interpreter", "reference", "auto"]
FRAMEWORKS = {"torch": torch, "tensorplay": tp}
PROGRAMS = int(os.environ.get("TPG_PROPERTY_PROGRAMS", "40"))

PURE = ("add", "scale", "relu")
ALIAS = ("t", "view", "float")
WRITE = ("add_", "relu_", "mul_", "setitem")


def random_steps(rng: random.Random, length: int) -> list:
    """``(op, i, j)`` steps over value indices; ``group[k]`` tracks which values share memory."""
    group = [0, 1]
    steps = []
    for _ in range(length):
        kind = rng.choice(PURE + ALIAS + WRITE + WRITE)
        i, j = rng.randrange(len(group)), rng.randrange(len(group))
        if kind == "add_" and group[i] == group[j]:
            kind = "add"  # a write reading overlapping memory is undefined in eager
        steps.append((kind, i, j))
        if kind in PURE:
            group.append(len(group) + 100)
        elif kind in ALIAS:
            group.append(group[i])
    return steps


def make_program(steps):
    def program(x, y):
        values = [x, y]
        for kind, i, j in steps:
            a, b = values[i], values[j]
            if kind == "add":
                values.append(a + b)
            elif kind == "scale":
                values.append(a * 0.5)
            elif kind == "relu":
                values.append(a.relu())
            elif kind == "t":
                values.append(a.t())
            elif kind == "view":
                values.append(a.view(4, 4))
            elif kind == "float":
                values.append(a.float())
            elif kind == "add_":
                a.add_(b)
            elif kind == "relu_":
                a.relu_()
            elif kind == "mul_":
                a.mul_(-2.0)
            else:
                a[1:3] = 0.25
        return tuple(v * 1 for v in values[2:]) + (x + 0, y + 0)
    return program


def numpy_of(values):
    return [np.array(v.numpy()) for v in values]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_random_programs_with_writes_match_eager(fw, backend):
    m = FRAMEWORKS[fw]
    rng = random.Random(f"{fw}-{backend}")
    for case in range(PROGRAMS):
        steps = random_steps(rng, rng.randint(3, 9))
        program = make_program(steps)
        compiled = tpg.compile(program, backend=backend)
        for call in range(2):
            data = np.random.default_rng(case * 2 + call).standard_normal((2, 4, 4))
            inputs = [m.tensor(d.astype(np.float32)) for d in data]
            eager_inputs = [m.tensor(d.astype(np.float32)) for d in data]
            got = numpy_of(list(compiled(*inputs)) + inputs)
            want = numpy_of(list(program(*eager_inputs)) + eager_inputs)
            for k, (g, w) in enumerate(zip(got, want)):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=(
                    f"value {k} of program {steps} (call {call}) on {fw}/{backend}"))
