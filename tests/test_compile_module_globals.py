"""Module-level state read through the user's *other* modules (``capture/user_code.py``): a
helper imported from the project's ``helpers.py``, ``helpers.SCALE`` read as an attribute,
a submodule whose ``forward`` lives in ``blocks.py``. Changing that state after a capture
must capture again, as Dynamo's guards do; before, the capture's values were served (four of
the cases below returned them). Also: the standard library's own objects (a module-level
``logging.Logger``, whose level cache fills as the program logs) are not program state.
"""

from __future__ import annotations

import importlib
import logging
import sys
import textwrap
import uuid

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.capture.user_code import is_stdlib_machinery, is_user_module  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def values(t):
    return np.asarray(t.tolist())


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``make(source, **globals)``: a module of the user's project, imported from a file."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def make(source, **names):
        name = f"tpg_user_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        module = importlib.import_module(name)
        vars(module).update(names)
        made.append(name)
        return module

    yield make
    for name in made:
        sys.modules.pop(name, None)


HELPERS = """
SCALE = 2.0
TABLE = {"k": 1.0}

def helper(x):
    return x * SCALE + TABLE["k"]
"""

CASES = {
    # name: (the program over module ``h``, the change to ``h`` after the first calls)
    "number read by an imported helper": (
        lambda h: (lambda helper: lambda x: helper(x).relu())(h.helper),
        lambda h, lib: setattr(h, "SCALE", 3.0)),
    "dict entry read by a helper called as module.helper": (
        lambda h: lambda x: h.helper(x) * 2,
        lambda h, lib: h.TABLE.__setitem__("k", 5.0)),
    "number read as module.SCALE": (
        lambda h: lambda x: x * h.SCALE,
        lambda h, lib: setattr(h, "SCALE", 4.0)),
    "tensor global rebound": (
        lambda h: lambda x: x + h.BIAS,
        lambda h, lib: setattr(h, "BIAS", lib.full((3,), 7.0))),
}


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
@pytest.mark.parametrize("case", list(CASES))
def test_state_of_another_user_module_is_guarded(fw, case, user_module):
    lib = FRAMEWORKS[fw]
    h = user_module(HELPERS, BIAS=lib.ones(3))
    build, change = CASES[case]
    # the program lives in a module of its own, as in a project: its globals are not h's
    f = user_module("def make(build, h):\n    return build(h)\n").make(build, h)
    compiled = tpg.compile(f)
    x = lib.ones(3)
    for _ in range(2):
        np.testing.assert_allclose(values(compiled(x)), values(f(x)))
    assert compiled.captures == 1  # unchanged state: the guards hold
    change(h, lib)
    np.testing.assert_allclose(values(compiled(x)), values(f(x)))
    assert compiled.captures == 2
    assert "recompiled: program state" in compiled.explain()


BLOCKS = """
import torch
USE_RELU = True

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        return y.relu() if USE_RELU else y.sigmoid()
"""


def test_a_flag_read_by_a_submodule_forward_in_another_module(user_module):
    blocks = user_module(BLOCKS)
    torch.manual_seed(0)
    model = torch.nn.Sequential(blocks.Block(), torch.nn.Linear(3, 2))
    compiled = tpg.compile(model)
    x = torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        blocks.USE_RELU = False
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.captures == 2


def test_a_module_level_logger_neither_breaks_the_graph_nor_recaptures(fw="torch"):
    logger = logging.getLogger(f"tpg_user_{uuid.uuid4().hex[:8]}")

    def f(x):
        logger.debug("tracing %s", 1)  # fills the logger's level cache during the trace
        return x.relu() * 2

    compiled = tpg.compile(f)
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), f(x))
        logger.info("between calls")
    assert compiled.frontend == "tensorplay_graph", compiled.explain()
    assert compiled.captures == 1


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
def test_a_simple_namespace_config_is_still_state(fw):
    import types
    lib = FRAMEWORKS[fw]
    cfg = types.SimpleNamespace(scale=2.0)

    def f(x):
        return x * cfg.scale

    compiled = tpg.compile(f)
    x = lib.ones(3)
    np.testing.assert_allclose(values(compiled(x)), [2.0] * 3)
    cfg.scale = 6.0
    np.testing.assert_allclose(values(compiled(x)), [6.0] * 3)


def test_which_modules_are_the_users(user_module):
    import types
    import numpy
    import torch.nn.functional
    import tensorplay_graph.compiler
    assert is_user_module(user_module("X = 1\n"))
    main = types.ModuleType("__main__")
    main.__file__ = numpy.__file__  # under a runner: still the script being run
    assert is_user_module(main)
    for library in (numpy, logging, torch.nn.functional, tensorplay_graph.compiler):
        assert not is_user_module(library), library
    assert is_stdlib_machinery(logging.getLogger("x"))
    assert not is_stdlib_machinery(types.SimpleNamespace(a=1))
    assert not is_stdlib_machinery(object.__new__(type("Mine", (), {})))
