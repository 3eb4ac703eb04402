"""compile() binds the call as made and gives results back with their types (both frameworks)."""

import collections
import dataclasses
from typing import Optional

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


def np_of(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def assert_same(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(got, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    elif dataclasses.is_dataclass(got):
        for field in dataclasses.fields(got):
            assert_same(getattr(got, field.name), getattr(want, field.name))
    elif isinstance(got, dict):
        assert list(got) == list(want)
        for key in got:
            assert_same(got[key], want[key])
    elif got is None or isinstance(got, (int, float, str)):
        assert got == want
    elif not hasattr(got, "detach") and hasattr(got, "__dict__"):  # a plain object
        assert_same(vars(got), vars(want))
    else:
        np.testing.assert_allclose(np_of(got), np_of(want), rtol=1e-5, atol=1e-6)


@dataclasses.dataclass
class ModelOutputLike(collections.OrderedDict):
    """Mimics transformers' ModelOutput: a dataclass whose non-None fields are dict entries."""

    logits: Optional[object] = None
    hidden_states: Optional[object] = None
    loss: Optional[object] = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __getitem__(self, key):
        return dict(self.items())[key] if isinstance(key, str) else self.to_tuple()[key]

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


Pair = collections.namedtuple("Pair", ["first", "second"])


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_varargs_kwargs_keywords_defaults_and_nested_inputs(fw):
    lib = FRAMEWORKS[fw]

    def program(x, mask=None, *rest, scale=2.0, **extra):
        h = x * scale
        if mask is not None:
            h = h * mask
        for t in rest:
            h = h + t
        for t in extra.get("biases", []):
            h = h - t
        return h + extra["table"]["shift"] if "table" in extra else h

    compiled = tpg.compile(program)
    x, m, r = lib.randn(3, 4), lib.rand(3, 4), lib.randn(3, 4)
    calls = [((x,), {}),
             ((x, m), {"scale": 0.5}),
             ((x, None, r, r), {}),
             ((x,), {"biases": [r, m], "table": {"shift": r}})]
    for args, kwargs in calls:
        assert_same(compiled(*args, **kwargs), program(*args, **kwargs))
    assert compiled.captures == len(calls)        # each structure is its own specialization
    for args, kwargs in calls:                    # ... reused on the next identical call
        assert_same(compiled(*args, **kwargs), program(*args, **kwargs))
    assert compiled.captures == len(calls)


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_non_tensor_values_are_part_of_the_key(fw):
    lib = FRAMEWORKS[fw]
    compiled = tpg.compile(lambda x, cfg: x * cfg["scale"] + cfg["shift"])
    x = lib.randn(4)
    for scale in (2.0, 3.0, 2.0):
        assert_same(compiled(x, {"scale": scale, "shift": 1.0}), x * scale + 1.0)
    assert compiled.captures == 2
    assert "cfg" in compiled.recompile_reasons[0] and "'scale'" in compiled.recompile_reasons[0]


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_outputs_keep_their_types(fw):
    lib = FRAMEWORKS[fw]

    def program(x):
        y = x.exp()
        return {
            "model_output": ModelOutputLike(logits=y, hidden_states=(x, y)),
            "pair": Pair(x + 1, [y, None]),
            "nested": ((x,), [y * 2, {"z": y - 1}]),
            "none": None,
            "number": 3,
        }

    x = lib.randn(2, 3)
    got, want = tpg.compile(program)(x), program(x)
    assert_same(got, want)
    out = got["model_output"]
    assert list(out.keys()) == ["logits", "hidden_states"] and out.loss is None
    assert got["pair"].first is not None and got["pair"].second[1] is None


def test_transformers_model_output_if_installed():
    outputs = pytest.importorskip("transformers.modeling_outputs")

    def program(x):
        return outputs.BaseModelOutput(last_hidden_state=x.tanh(), hidden_states=(x,))

    x = torch.randn(2, 3)
    got = tpg.compile(program)(x)
    assert_same(got, program(x))
    assert isinstance(got, outputs.BaseModelOutput) and got[0] is got.last_hidden_state


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_module_forward_with_kwargs_signature(fw):
    lib = FRAMEWORKS[fw]
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, hidden, attention_mask=None, **kwargs):
            out = self.proj(hidden)
            if attention_mask is not None:
                out = out * attention_mask
            return ModelOutputLike(logits=out, hidden_states=kwargs.get("past"))

    block = Block()
    compiled = tpg.compile(block)
    h, mask = lib.randn(2, 4), lib.ones(2, 4)
    with lib.no_grad():
        assert_same(compiled(h, attention_mask=mask, past=(h, h)), block(h, attention_mask=mask, past=(h, h)))
        assert_same(compiled(h), block(h))


def test_capture_names_placeholders_after_the_call():
    x = torch.randn(2)
    gm = tpg.capture(lambda x, *rest, **kw: x + rest[0] + kw["pair"][1], x, x, pair=(x, x))
    assert [n.target for n in gm.graph.nodes if n.op == "placeholder"] == \
        ["x", "rest_0", "pair_0", "pair_1"]


class _Layer:
    def __init__(self):
        self.keys = self.values = None
        self.is_initialized = False


class _KVCache:
    """Like transformers' DynamicCache: a plain object whose layers hold tensors."""

    def __init__(self):
        self.layers, self.note = [_Layer(), _Layer()], "kv"


def test_plain_objects_holding_traced_tensors_come_back_rebuilt():
    import torch

    def program(x):
        cache = _KVCache()
        for i, layer in enumerate(cache.layers):
            layer.keys, layer.values, layer.is_initialized = x * (i + 1), x - i, True
        return {"logits": x.sum(-1), "past_key_values": cache}

    x = torch.randn(3, 4)
    want = program(x)
    for _ in range(2):
        got = tpg.compile(program, backend="reference")(x)
        assert isinstance(got["past_key_values"], _KVCache) and got["past_key_values"].note == "kv"
        torch.testing.assert_close(got["logits"], want["logits"])
        for mine, eager in zip(got["past_key_values"].layers, want["past_key_values"].layers):
            assert isinstance(mine, _Layer) and mine.is_initialized
            torch.testing.assert_close(mine.keys, eager.keys)
            torch.testing.assert_close(mine.values, eager.values)
