"""Plain objects a compiled program reads tensors from or writes into (``capture/object_state.py``).

Capture keys a plain-object argument by identity and bakes what the program reads from it.
A tensor read through an object's attribute, or a write into an argument object, would be
frozen at capture (or leak a traced placeholder to the caller): both are a graph break to
Dynamo for torch programs and eager for TensorPlay programs, and the object is left as the
program left it in eager.
"""

from __future__ import annotations

import copy
import gc

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.capture.object_state import ObjectStateError  # noqa: E402
from tensorplay_graph.capture.structure import ObjectIdentity  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}


class Box:
    def __init__(self, t=None, scale=1.0):
        self.t, self.scale = t, scale


class Counter:
    def __init__(self):
        self.n, self.history = 0, []


def add_attribute(x, box):
    return x + box.t


def count(x, counter):
    counter.n += 1
    counter.history.append(x * 2)
    return x + counter.n


def scaled(x, box):  # reads only a number from the object: stays our capture
    return x * box.scale


def values(t):
    return np.asarray(t.tolist())


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
def test_a_tensor_read_through_a_new_object_each_call_is_never_stale(fw):
    # before: the second Box, allocated where the first was freed, matched its key and the
    # graph added the first box's (baked) tensor
    lib = FRAMEWORKS[fw]
    compiled, x = tpg.compile(add_attribute), lib.zeros(3)
    for i in range(4):
        box = Box(lib.full((3,), float(i)))
        np.testing.assert_array_equal(values(compiled(x, box)), np.full(3, float(i)))
        del box
        gc.collect()
    if fw == "torch":
        assert compiled.frontend == "dynamo" and "argument 1.t" in compiled.frontend_reason


def test_a_tensor_attribute_replaced_or_written_between_calls_is_read_each_call():
    compiled, x, box = tpg.compile(add_attribute), torch.zeros(3), Box(torch.zeros(3))
    for i in range(3):
        box.t = torch.full((3,), float(i))
        torch.testing.assert_close(compiled(x, box), x + box.t)
    for i in range(3):
        box.t.fill_(10.0 + i)
        torch.testing.assert_close(compiled(x, box), x + box.t)


GLOBAL_BOX = Box(torch.zeros(3))


def add_global_attribute(x):
    return x + GLOBAL_BOX.t


def test_a_tensor_read_through_a_global_object_is_read_each_call():
    compiled, x = tpg.compile(add_global_attribute), torch.zeros(3)
    for i in range(3):
        GLOBAL_BOX.t = torch.full((3,), float(i))
        torch.testing.assert_close(compiled(x), x + GLOBAL_BOX.t)
    with pytest.raises(ObjectStateError, match="global GLOBAL_BOX.t"):
        tpg.compile(add_global_attribute, fullgraph=True)(x)


@pytest.mark.parametrize("fw", ["torch", "tensorplay"])
def test_writes_into_an_argument_object_happen_as_in_eager(fw):
    # before: the counter kept n == 0 and a traced placeholder in its history
    lib = FRAMEWORKS[fw]
    compiled, x = tpg.compile(count), lib.zeros(3)
    ours, theirs = Counter(), Counter()
    for _ in range(3):
        np.testing.assert_array_equal(values(compiled(x, ours)), values(count(x, theirs)))
        assert ours.n == theirs.n and len(ours.history) == len(theirs.history)
        assert all(type(t) is type(x) for t in ours.history)


def test_an_object_read_only_for_numbers_stays_captured_and_is_keyed_by_identity():
    compiled, x = tpg.compile(scaled), torch.ones(3)
    for i in range(3):
        box = Box(scale=float(i + 2))
        torch.testing.assert_close(compiled(x, box), x * box.scale)
        del box
        gc.collect()
    assert compiled.frontend == "tensorplay_graph"


def test_object_identity_never_equals_a_new_object_at_a_reused_address():
    box = Box()
    key = ObjectIdentity(box)
    assert key == ObjectIdentity(box) and hash(key) == id(box)
    address = id(box)
    del box
    gc.collect()
    assert all(ObjectIdentity(Box()) != key for _ in range(20))  # some land at ``address``
    assert "Box object at" in repr(key) and hex(address) in repr(key)


def test_a_transformers_cache_passed_to_the_model_holds_real_tensors_after_each_call():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    compiled = tpg.compile(model)
    ids = torch.randint(0, 100, (2, 6), generator=torch.Generator().manual_seed(1))
    ours, theirs = transformers.DynamicCache(config=cfg), transformers.DynamicCache(config=cfg)
    with torch.no_grad():
        for step in (ids, ids[:, :1], ids[:, 1:2]):
            got = compiled(step, past_key_values=ours, use_cache=True).logits
            want = model(step, past_key_values=theirs, use_cache=True).logits
            torch.testing.assert_close(got, want)
            assert ours.get_seq_length() == theirs.get_seq_length()
            assert isinstance(ours.layers[0].keys, torch.Tensor)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.offset = torch.zeros(3)  # a plain tensor attribute, not a buffer
        self.scale = 1.0
        self.holder = Box(torch.zeros(3))

    def forward(self, x):
        return self.lin(x) * self.scale + self.offset


class HeldTensor(Scaled):
    def forward(self, x):
        return self.lin(x) + self.holder.t


class Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


def test_model_train_after_a_capture_captures_again():
    # before: the eval-mode graph (dropout off, batch norm's running statistics) kept running
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5),
                                torch.nn.BatchNorm1d(4)).eval()
    compiled, x = tpg.compile(model), torch.randn(8, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        model.train()
        torch.manual_seed(0)
        want = model(x)
        torch.manual_seed(0)
        torch.testing.assert_close(compiled(x), want)
    assert any("'training' changed" in r for r in compiled.recompile_reasons)


def test_a_modules_plain_attributes_are_read_or_guarded_each_call():
    model, x = Scaled(), torch.randn(2, 3)
    compiled = tpg.compile(model)
    with torch.no_grad():
        for i in range(3):
            model.offset = torch.full((3,), float(i))  # replaced: captured again
            torch.testing.assert_close(compiled(x), model(x))
        model.offset.fill_(7.0)  # written in place: the graph reads the tensor itself
        torch.testing.assert_close(compiled(x), model(x))
        model.scale = 3.0  # a number: guarded by value
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.frontend == "tensorplay_graph"


def test_a_tensor_held_by_a_plain_object_of_a_module_breaks_the_graph():
    model, x = HeldTensor(), torch.randn(2, 3)
    compiled = tpg.compile(model)
    with torch.no_grad():
        for i in range(3):
            model.holder.t = torch.full((3,), float(i))
            torch.testing.assert_close(compiled(x), model(x))
    assert "self.holder.t" in compiled.frontend_reason


def test_a_module_that_changes_its_own_attribute_runs_as_eager_does():
    ours, theirs, x = Counting(), Counting(), torch.ones(2)
    compiled = tpg.compile(ours)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), theirs(x))
    assert ours.calls == theirs.calls == 3
    assert "attribute 'calls' of module Counting" in compiled.frontend_reason


def test_switching_between_train_and_eval_captures_each_mode_once():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5),
                                torch.nn.BatchNorm1d(4))
    reference = copy.deepcopy(model)
    compiled, x = tpg.compile(model), torch.randn(8, 4)
    for epoch in range(4):
        for m in (model, reference):
            m.train()
        torch.manual_seed(epoch)
        got = compiled(x)
        torch.manual_seed(epoch)
        torch.testing.assert_close(got, reference(x))
        for m in (model, reference):
            m.eval()
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), reference(x))
    assert compiled.captures == 2


def test_hooks_added_or_removed_after_a_capture_are_seen():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    compiled, x = tpg.compile(model), torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        handle = model[0].register_forward_hook(lambda mod, inp, out: out * 0)
        torch.testing.assert_close(compiled(x), model(x))  # a submodule's hook: captured again
        handle.remove()
        torch.testing.assert_close(compiled(x), model(x))
        handle = model.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
        torch.testing.assert_close(compiled(x), model(x))  # the root's own hook: Dynamo runs it
        handle.remove()
    assert any("hooks changed" in r for r in compiled.recompile_reasons)
    assert "forward (pre-)hooks" in compiled.frontend_reason


def test_a_write_into_a_dict_argument_happens_as_in_eager():
    # before: the trace wrote into its own copy of the dict; the caller's stayed empty
    def stores(x, found):
        found["double"] = x * 2
        return x + 1

    ours, theirs, x = {}, {}, torch.ones(2)
    compiled = tpg.compile(stores)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, ours), stores(x, theirs))
        torch.testing.assert_close(ours["double"], theirs["double"])


def test_a_changed_default_dtype_captures_again():
    # a tensor the program makes (torch.ones) takes the default dtype, baked at capture
    def shifted(x):
        return x + torch.ones(3)

    compiled, x = tpg.compile(shifted), torch.ones(3, dtype=torch.float16)
    assert compiled(x).dtype == torch.float32
    torch.set_default_dtype(torch.float64)
    try:
        assert compiled(x).dtype == shifted(x).dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert compiled(x).dtype == torch.float32
    assert any("default dtype changed" in r for r in compiled.recompile_reasons)


def test_numbers_read_from_a_plain_object_are_guarded():
    compiled, x, box = tpg.compile(scaled), torch.ones(3), Box(scale=2.0)
    torch.testing.assert_close(compiled(x, box), x * 2.0)
    box.scale = 5.0  # the same object: keyed by identity, its numbers by value
    torch.testing.assert_close(compiled(x, box), x * 5.0)


def test_a_changed_model_config_flag_captures_again():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=64, use_cache=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    compiled, ids = tpg.compile(model), torch.randint(0, 100, (1, 4))
    with torch.no_grad():
        assert compiled(ids).hidden_states is None
        model.config.output_hidden_states = True
        got, want = compiled(ids), model(ids)
    assert got.hidden_states is not None and len(got.hidden_states) == len(want.hidden_states)


class ListHolder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.extra = [torch.zeros(3)]  # tensors in a plain list attribute

    def forward(self, x):
        return x + self.extra[0]


def test_a_tensor_in_a_modules_list_is_read_each_call():
    model, x = ListHolder(), torch.zeros(3)
    compiled = tpg.compile(model)
    for i in range(3):
        model.extra[0] = torch.full((3,), float(i))
        torch.testing.assert_close(compiled(x), model(x))
    assert "self.extra[0]" in compiled.frontend_reason


class StepCounter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.steps += 1  # the in-place result, stored back into the buffer
        return x * self.steps


def test_an_in_place_update_of_a_buffer_with_augmented_assignment_stays_captured():
    # before: "stores a traced tensor in self._buffers['steps']" (a GraphCaptureError)
    ours, theirs, x = StepCounter(), StepCounter(), torch.ones(2)
    buffer = ours.steps
    compiled = tpg.compile(ours)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), theirs(x))
    assert ours.steps is buffer and float(ours.steps) == float(theirs.steps) == 3.0
    assert compiled.frontend == "tensorplay_graph"
