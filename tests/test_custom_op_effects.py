"""Custom-op bodies never run during capture; a compiled call runs each exactly once.

A body may launch a kernel, count its calls or write into an input it did not
declare: capture (with or without ``register_fake``) must not run it, and the first
compiled call -- which also captures and lowers -- must run it once, like eager.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorplay as tp
import torch

import tensorplay_graph as tpg
from tensorplay_graph import library as L
from test_library_helpers import fresh_ns

BACKENDS = ["interpreter", "reference", "auto"]
FRAMEWORKS = {"torch": torch, "tensorplay": tp}
DEFINERS = {"custom_op": L.custom_op, "triton_op": L.triton_op, "tile_lang_op": L.tile_lang_op}


def _np(t):
    return np.asarray(t.numpy())


def counting_op(definer, fake):
    calls = []

    def body(x):
        calls.append(1)
        return x[..., :2] * 3  # an output shape that only running (or a fake) reveals

    op = definer(f"{fresh_ns()}::counted", body, mutates_args=())
    if fake:
        op.register_fake(lambda x: x[..., :2].clone())
    return op, calls


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fake", [False, True], ids=["no_fake", "fake"])
@pytest.mark.parametrize("definer", list(DEFINERS))
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_body_runs_once_per_compiled_call(fw, definer, fake, backend):
    m = FRAMEWORKS[fw]
    op, calls = counting_op(DEFINERS[definer], fake)

    def program(x):
        return (op(x * 2) + 1).sum(-1) * 0.5

    compiled = tpg.compile(program, backend=backend)
    for _ in range(3):
        x = m.randn(3, 5)
        before = len(calls)
        out = compiled(x)
        assert len(calls) - before == 1  # before: 2 on the first call (capture / shape_prop)
        np.testing.assert_allclose(_np(out), _np(program(x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fake", [False, True], ids=["no_fake", "fake"])
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_undeclared_mutation_happens_once_on_the_first_call(fw, fake, backend):
    m = FRAMEWORKS[fw]

    def body(x):
        x.add_(1)  # writes its input without declaring mutates_args
        return x * 2

    op = L.custom_op(f"{fresh_ns()}::sneaky", body, mutates_args=())
    if fake:
        op.register_fake(lambda x: x.clone())

    def program(x):
        return op(x) + 1

    compiled = tpg.compile(program, backend=backend)
    for _ in range(2):
        x, x_eager = m.zeros(4), m.zeros(4)
        np.testing.assert_allclose(_np(compiled(x)), _np(program(x_eager)))
        np.testing.assert_allclose(_np(x), _np(x_eager))  # before: 2.0 on the first call


def test_explain_never_runs_a_body_and_says_why_downstream_is_eager():
    op, calls = counting_op(L.triton_op, fake=False)
    plan = tpg.explain(lambda x: (op(x) + 1).exp(), torch.randn(3, 5), backend="reference")
    assert calls == []
    assert plan.barrier_codes["add"] == "no_meta" and plan.barrier_codes["exp"] == "no_meta"
