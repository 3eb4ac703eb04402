"""Capture's side effects: ``print`` runs at call time, and no global state is touched.

``print(x)`` inside a program prints the real values on every compiled call (not
``Proxy(x)`` once at capture); capture never saves and restores the global random
state, so numbers another thread draws meanwhile are not replayed.
"""

from __future__ import annotations

import builtins
import threading

import numpy as np
import pytest
import tensorplay as tp
import torch

import tensorplay_graph as tpg
from tensorplay_graph import library as L
from test_library_helpers import fresh_ns

BACKENDS = ["interpreter", "reference", "auto"]
FRAMEWORKS = {"torch": torch, "tensorplay": tp}


def printing(x):
    y = x * 2
    print("y =", y, end=";\n")
    return y + 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_print_shows_real_values_on_every_call(fw, backend, capsys):
    m = FRAMEWORKS[fw]
    compiled = tpg.compile(printing, backend=backend)
    for value in (1.0, 5.0):
        x = m.full((3,), value)
        out = compiled(x)
        printed = capsys.readouterr().out
        expected = printing(x)
        assert printed == capsys.readouterr().out  # one print per call, as eager
        np.testing.assert_allclose(out.numpy(), expected.numpy())
        assert "Proxy" not in printed and printed.startswith("y = ")


def test_print_is_a_side_effect_barrier_and_print_is_restored():
    original = builtins.print
    plan = tpg.explain(printing, torch.ones(3), backend="reference")
    assert builtins.print is original
    assert plan.barrier_codes["runtime_print"] == "side_effect"
    assert "real values" in plan.barriers["runtime_print"]


def test_print_of_plain_values_during_capture_runs_once(capsys):
    def program(x):
        print("tracing")
        return x + 1
    compiled = tpg.compile(program, backend="reference")
    compiled(torch.ones(2))
    compiled(torch.ones(2))
    assert capsys.readouterr().out == "tracing\n"  # no proxy: capture runs it, as before


@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_capture_does_not_replay_another_threads_random_numbers(fw):
    m = FRAMEWORKS[fw]
    capturing, drawn, during = threading.Event(), threading.Event(), []

    op = L.custom_op(f"{fresh_ns()}::meet", lambda x: x * 1, mutates_args=())

    @op.register_fake
    def _(x):  # runs during capture: let the other thread draw now
        capturing.set()
        assert drawn.wait(10)
        return m.empty_like(x)

    def other_thread():
        capturing.wait(10)
        during.append(m.rand(8).numpy().copy())
        drawn.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    tpg.capture(lambda x: op(x) + m.rand(3), m.ones(3))
    thread.join(10)
    after = m.rand(8).numpy()
    assert not np.array_equal(during[0], after)  # before: equal (the state was restored)


@pytest.mark.parametrize("fw", list(FRAMEWORKS))
def test_capture_draws_nothing_from_the_global_stream(fw):
    m = FRAMEWORKS[fw]

    def program(x):
        return x + m.rand(3) + m.nn.functional.dropout(x, 0.5) + m.rand_like(x)

    state = m.get_rng_state().clone()
    gm = tpg.capture(program, m.ones(3))
    assert m.equal(m.get_rng_state(), state)
    m.manual_seed(3)
    first = gm(m.ones(3))
    m.manual_seed(3)
    np.testing.assert_array_equal(first.numpy(), program(m.ones(3)).numpy())
