"""Misuse gets a clear message, and traced placeholders never reach the caller."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import tensorplay as tp
import torch

import tensorplay_graph as tpg
from tensorplay_graph import library as L
from tensorplay_graph.errors import GraphCaptureError
from test_library_helpers import fresh_ns

STORE = []


@dataclass
class Box:
    value: object


class Remembers(torch.nn.Module):
    def forward(self, x):
        self.last = x * 2  # kept on the module: a placeholder after capture
        return x + 1


def generator(x):
    yield x * 2


class Slotted:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def returns_slotted(x):
    return Slotted(x * 2)


def test_dataclasses_and_plain_objects_come_back_rebuilt():
    out = tpg.compile(lambda x: Box(x * 2), backend="reference")(torch.ones(2))
    assert isinstance(out, Box)
    torch.testing.assert_close(out.value, torch.full((2,), 2.0))


def returns_set(x):
    return {x * 2}


def stores_global(x):
    STORE.append(x * 3)
    return x


@pytest.mark.parametrize("program, words", [
    (generator, "generator"), (returns_slotted, "result (Slotted).value"),
    (returns_set, "tuples, lists or dicts"), (stores_global, "global STORE[0]"),
    (Remembers(), "self.last"),
], ids=["generator", "object", "set", "global", "module_attribute"])
def test_a_proxy_never_escapes(program, words):
    STORE.clear()
    with pytest.raises(GraphCaptureError, match=words.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        tpg.compile(program, backend="reference", fullgraph=True)(torch.ones(2))
    assert STORE == []  # the trace's store was undone
    assert "last" not in vars(program) if isinstance(program, Remembers) else True


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
def test_a_store_into_the_programs_state_runs_as_in_eager(fw):
    """A cache filled on the first call (timm's LeViT ``attention_bias_cache``): the trace's
    store is undone and the framework's frontend (Dynamo) or eager runs the program, which
    stores the real tensor, once per call as eager does."""
    lib = {"torch": torch, "tensorplay": tp}[fw]
    STORE.clear()
    compiled = tpg.compile(stores_global)
    x = lib.ones(2)
    np.testing.assert_allclose(np.asarray(compiled(x).tolist()), [1.0, 1.0])
    compiled(x)
    assert len(STORE) == 2 and all(type(v) is type(x) for v in STORE)
    np.testing.assert_allclose(np.asarray(STORE[1].tolist()), [3.0, 3.0])
    assert "global STORE[0]" in compiled.explain()


def test_a_module_caching_a_tensor_on_itself_keeps_the_real_tensor():
    module = Remembers()
    compiled = tpg.compile(module)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), x + 1)
    torch.testing.assert_close(module.last, x * 2)  # a real tensor, not a placeholder


def test_a_generator_runs_eagerly_with_fallback_eager():
    compiled = tpg.compile(generator, options={"fallback": "eager"})
    (value,) = list(compiled(torch.ones(2)))
    torch.testing.assert_close(value, torch.full((2,), 2.0))  # before: Proxy(mul)


def test_named_tuples_lists_and_dicts_still_return():
    def program(x):
        return {"a": [x + 1, (x * 2,)]}
    out = tpg.compile(program, backend="reference")(torch.ones(2))
    torch.testing.assert_close(out["a"][1][0], torch.full((2,), 2.0))


def test_options_must_be_a_dict():
    with pytest.raises(TypeError, match=r"options must be a dict.*backend='reference'"):
        tpg.compile(lambda x: x, options="reference")


@pytest.mark.parametrize("backend", ["interpreter", "reference", "auto"])
@pytest.mark.parametrize("fw, fn, n", [("torch", torch.sigmoid, 1), ("torch", torch.add, 2),
                                       ("tensorplay", tp.exp, 1), ("tensorplay", tp.mul, 2)])
def test_builtins_compile(fw, fn, n, backend):
    m = torch if fw == "torch" else tp
    args = [m.randn(3, 4) for _ in range(n)]
    out = tpg.compile(fn, backend=backend)(*args)
    np.testing.assert_allclose(out.numpy(), fn(*args).numpy(), rtol=1e-6)


def test_fake_returning_none_names_the_op_and_the_fake():
    op = L.custom_op(f"{fresh_ns()}::double", lambda x: x * 2, mutates_args=())

    @op.register_fake
    def forgot_to_return(x):
        x.new_empty(x.shape)

    with pytest.raises(TypeError, match=r"fake kernel of .*::double, .*forgot_to_return \(.*"
                                        r"test_misuse.py:\d+\), returned None"):
        tpg.compile(lambda x: op(x) + 1)(torch.ones(2))


def test_fake_may_return_none_for_an_op_returning_none():
    def fill(x: torch.Tensor) -> None:
        x.fill_(3.0)

    op = L.custom_op(f"{fresh_ns()}::fill", fill, mutates_args=("x",))
    op.register_fake(lambda x: None)

    def program(x):
        op(x)
        return x + 1
    x = torch.zeros(2)
    torch.testing.assert_close(tpg.compile(program, backend="reference")(x), torch.full((2,), 4.0))
