"""Random programs over Python state, changed between calls: compiled == eager after each change.

The op fuzzer's programs take tensors and literals only; F11-F14 (tests/models/FINDINGS.md)
came from state a program reads through its globals, closure cells and containers. Each case
here builds a namespace of such state (dicts and lists of numbers and tensors, a nested dict,
a plain object, a class attribute list, a closure list, a numpy scalar and array), a function
reading a random subset of it, and then changes the state between calls at random (a number set, a tensor replaced or
written in place, an entry appended or added, a container rebound) -- every call must equal
eager's on the state as it is. ``TPG_STATE_CASES`` runs more cases (default 60 per framework).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

FRAMEWORKS = {"torch": torch, "tensorplay": tp}
CASES = int(os.environ.get("TPG_STATE_CASES", "60"))

#: terms a program adds to its result: (source, the state names it reads)
TERMS = [
    "x * CFG['scale']",
    "x + W['w']",
    "x * NEST['inner']['s'] + NEST['inner']['t']",
    "x * OBJ.scale",
    "x * Holder.factors[0]",
    "x + CELL[0]",
    "_scaled_by_each(x)",
    "_sum_of_values(x)",
    "x * len(SIZES)",
    "x * float(NPS)",
    "x + lib.from_numpy(ARR)",
]

PRELUDE = """
def _scaled_by_each(x):
    for s in SIZES:
        x = x * s
    return x

def _sum_of_values(x):
    out = x * 0
    for v in CFG.values():
        out = out + v
    return out
"""


class Obj:
    def __init__(self, scale):
        self.scale = scale


def _state(lib, rng):
    t = lambda: lib.tensor(rng.standard_normal(3).astype(np.float32).tolist())  # noqa: E731
    holder = type("Holder", (), {"factors": [float(rng.integers(1, 4))]})
    holder.__module__ = "<state case>"
    return {"lib": lib, "__name__": "<state case>", "CFG": {"scale": 2.0, "bias": 1.0},
            "W": {"w": t()}, "NEST": {"inner": {"s": 3.0, "t": t()}}, "OBJ": Obj(1.5),
            "Holder": holder, "SIZES": [1.0, 2.0], "NPS": np.float32(0.5),
            "ARR": np.ones(3, np.float32)}


def _changes(lib, ns, cell, rng):
    t = lambda: lib.tensor(rng.standard_normal(3).astype(np.float32).tolist())  # noqa: E731
    return [
        lambda: ns["CFG"].__setitem__("scale", float(rng.integers(-3, 4))),
        lambda: ns["CFG"].__setitem__(f"k{rng.integers(100)}", 0.5),
        lambda: ns.__setitem__("CFG", {"scale": -1.0}),
        lambda: ns["W"].__setitem__("w", t()),
        lambda: ns["W"]["w"].add_(1.0),
        lambda: ns["NEST"].__setitem__("inner", {"s": float(rng.integers(1, 5)), "t": t()}),
        lambda: ns["NEST"]["inner"].__setitem__("s", 7.0),
        lambda: setattr(ns["OBJ"], "scale", float(rng.integers(-2, 3))),
        lambda: ns.__setitem__("OBJ", Obj(0.25)),
        lambda: ns["Holder"].factors.__setitem__(0, float(rng.integers(5, 9))),
        lambda: ns["SIZES"].append(0.5),
        lambda: ns["SIZES"].pop() if len(ns["SIZES"]) > 1 else None,
        lambda: cell.__setitem__(0, t()),
        lambda: cell[0].mul_(2.0),
        lambda: ns.__setitem__("NPS", np.float32(rng.integers(1, 4))),
        lambda: ns.__setitem__("ARR", np.full(3, float(rng.integers(2, 5)), np.float32)),
        lambda: ns["ARR"].__setitem__(0, 9.0),
        lambda: None,
    ]


def _program(lib, seed):
    rng = np.random.default_rng(seed)
    ns = _state(lib, rng)
    cell = [lib.ones(3)]
    terms = list(rng.choice(TERMS, size=int(rng.integers(1, 4)), replace=False))
    source = PRELUDE + "def make(CELL):\n    def f(x):\n        return " + " + ".join(terms) + \
        "\n    return f\n"
    exec(compile(source, "<state case>", "exec"), ns)
    return ns["make"](cell), ns, cell, rng, terms


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
@pytest.mark.parametrize("seed", range(CASES))
def test_a_program_over_changing_state_equals_eager(fw, seed):
    lib = FRAMEWORKS[fw]
    f, ns, cell, rng, terms = _program(lib, seed)
    compiled = tpg.compile(f)
    changes = _changes(lib, ns, cell, rng)
    x = lib.ones(3)
    for call in range(5):
        want = np.asarray(f(x).tolist())
        got = np.asarray(compiled(x).tolist())
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"terms {terms}, call {call}")
        changes[int(rng.integers(len(changes)))]()


MODULE_TERMS = [
    "x * self.cfg['scale']",
    "x * self._private['s']",
    "self._each(x)",
    "x * self.obj.scale",
    "x * self.sub.scale",
    "x + self.table['t']",
    "x * (2.0 if self.training else 3.0)",
    "self.sub.linear(x)",
]


def _module(lib, seed):
    rng = np.random.default_rng(seed)
    nn = lib.nn
    terms = list(rng.choice(MODULE_TERMS, size=int(rng.integers(1, 4)), replace=False))
    source = ("def forward(self, x):\n    return " + " + ".join(terms) + "\n\n"
              "def _each(self, x):\n    for s in self.sizes:\n        x = x * s\n    return x\n")
    namespace = {}
    exec(compile(source, "<state module>", "exec"), namespace)
    body = type("Body", (nn.Module,), {"forward": namespace["forward"], "_each": namespace["_each"]})
    model = body()
    model.sub = nn.Module()
    model.sub.scale = 1.5
    model.sub.linear = nn.Linear(3, 3)
    model.cfg, model._private, model.sizes = {"scale": 2.0}, {"s": 0.5}, [1.0, 3.0]
    model.obj, model.table = Obj(4.0), {"t": lib.ones(3)}
    t = lambda: lib.tensor(rng.standard_normal(3).astype(np.float32).tolist())  # noqa: E731
    changes = [
        lambda: model.cfg.__setitem__("scale", float(rng.integers(-3, 4))),
        lambda: model._private.__setitem__("s", float(rng.integers(1, 5))),
        lambda: model.sizes.append(2.0),
        lambda: setattr(model.obj, "scale", float(rng.integers(-2, 3))),
        lambda: setattr(model, "obj", Obj(0.5)),
        lambda: setattr(model.sub, "scale", float(rng.integers(1, 4))),
        lambda: model.table.__setitem__("t", t()),
        lambda: model.train(),
        lambda: model.eval(),
        lambda: setattr(model, "cfg", {"scale": 5.0}),
        lambda: None,
    ]
    return model, changes, rng, terms


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
@pytest.mark.parametrize("seed", range(CASES))
def test_a_module_over_changing_attributes_equals_eager(fw, seed):
    lib = FRAMEWORKS[fw]
    model, changes, rng, terms = _module(lib, seed)
    compiled = tpg.compile(model)
    x = lib.ones(3)
    with lib.no_grad():
        for call in range(5):
            want = np.asarray(model(x).tolist())
            got = np.asarray(compiled(x).tolist())
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6,
                                       err_msg=f"terms {terms}, call {call}")
            changes[int(rng.integers(len(changes)))]()
