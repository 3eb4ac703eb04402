"""Typed outputs (named tuples, dataclasses, mappings, plain objects holding tensors) come back
as eager returns them, on the first call and from the generated steady-state entry; and the
resolved :func:`restorer` rebuilds what :func:`restore` does for every kind of spec."""

import collections
import dataclasses

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.capture.structure import restore, restorer  # noqa: E402

from test_compile_calls import assert_same  # noqa: E402

Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Out:
    loss: torch.Tensor
    parts: tuple
    note: str = "x"
    total: torch.Tensor = dataclasses.field(default=None, init=False)


class Cache:
    def __init__(self, key):
        self.key = key
        self.tag = "kept"


def program(x, y):
    out = Out((x * y).sum(), (Pair(x + 1, y - 1), [x.exp()]))
    out.total = x + y
    return {"out": out, "ordered": collections.OrderedDict(z=x * 2), "cache": Cache(y * 3),
            "pairs": [Pair(x, y)]}


def test_typed_outputs_as_eager_on_every_call():
    x, y = torch.randn(3), torch.randn(3)
    compiled = tpg.compile(program)
    for _ in range(4):  # capture, then the steady-state entry
        assert_same(compiled(x, y), program(x, y))
    spec = next(iter(compiled.specializations.values()))
    assert spec.entry, "the steady-state entry serves this call structure"
    assert spec.output_spec is not None


def test_restorer_matches_restore_for_each_kind():
    x, y = torch.randn(3), torch.randn(3)
    compiled = tpg.compile(program)
    compiled(x, y)
    spec = next(iter(compiled.specializations.values()))
    flat = spec.runner(x, y)
    assert_same(restorer(spec.output_spec)(flat), restore(spec.output_spec, flat))
    assert restorer(None)(flat) is flat
