"""Data-dependent Python: compile() hands the program to the framework's frontend (graph break).

Also: while our capture runs, libraries see a compiler tracing (``is_compiling()``).
"""

import logging
import threading

import numpy as np
import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph import GraphCaptureError  # noqa: E402
from tensorplay_graph.capture import UntraceableCallError  # noqa: E402

FRAMEWORKS = {"tensorplay": tp, "torch": torch}
FRONTENDS = {"tensorplay": "tensorplay", "torch": "dynamo"}


def assert_close(got, want):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)


def branchy(x):
    if x.sum() > 0:
        return x * 2 + 1
    return x - 1


def reads_item(x):
    return x * int(x.abs().max().item() > 1.0) + 1


def contains(ids):
    # transformers' pad-token warning helper does exactly this
    if 3 in ids[:, [-1, 0]]:
        return ids * 2
    return ids + 1


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_data_dependent_branch_compiles_through_the_frontend(fw, caplog):
    lib = FRAMEWORKS[fw]
    caplog.set_level(logging.INFO, logger="tensorplay_graph.compile")
    compiled = tpg.compile(branchy)
    positive, negative = lib.ones(4), -lib.ones(4)
    for x in (positive, negative, positive):
        assert_close(compiled(x), branchy(x))
    assert compiled.frontend == FRONTENDS[fw]
    assert "data-dependent control flow" in compiled.frontend_reason
    assert FRONTENDS[fw] in compiled.explain() and "graph break" in compiled.explain()
    assert any("graph break" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


@pytest.mark.parametrize("program", [reads_item, contains])
def test_item_and_membership_tests_break_the_graph(program):
    # interpreter: the Dynamo graph of reads_item holds an `item` node, which lowering of
    # the Dynamo path does not take yet (the importer's area); the switch is what is tested
    compiled = tpg.compile(program, backend="interpreter")
    if program is contains:
        inputs = [torch.tensor([[3, 1], [2, 2]]), torch.tensor([[1, 1], [2, 2]])]
    else:
        inputs = [torch.full((3,), 2.0), torch.full((3,), 0.5)]
    for x in inputs:
        assert_close(compiled(x), program(x))
    assert compiled.frontend == "dynamo"


@pytest.mark.parametrize("fw", ["tensorplay", "torch"])
def test_fullgraph_keeps_the_strict_error(fw):
    compiled = tpg.compile(branchy, fullgraph=True)
    with pytest.raises(GraphCaptureError, match="data-dependent control flow"):
        compiled(FRAMEWORKS[fw].ones(4))


def test_is_compiling_is_true_only_inside_our_capture_and_only_in_its_thread():
    seen_elsewhere = []
    started, release = threading.Event(), threading.Event()

    def other_thread():
        started.set()
        release.wait(5)
        seen_elsewhere.append(torch.compiler.is_compiling())

    thread = threading.Thread(target=other_thread)
    thread.start()
    started.wait(5)

    def program(x):
        release.set()
        thread.join(5)  # the other thread asks while our capture runs
        flags = (torch.compiler.is_compiling(), torch._dynamo.is_compiling())
        return x * 2 if all(flags) else x * 3

    x = torch.ones(2)
    assert_close(tpg.compile(program)(x), x * 2)
    assert seen_elsewhere == [False]
    assert not torch.compiler.is_compiling()


def test_tensorplay_is_compiling_inside_capture():
    def program(x):
        return x * 2 if tp.compiler.is_compiling() else x * 3

    x = tp.ones(2)
    assert_close(tpg.compile(program)(x), x * 2)
    assert not tp.compiler.is_compiling()


def log_softmax_of_selected(x):
    # fuzz seed 40011545: log_softmax of an empty bool tensor runs in eager (the kernel returns
    # early) but Dynamo's fake-tensor ref rejects it (it subtracts bools)
    v = torch.masked_select(x, x)
    torch.nn.functional.log_softmax(v, dim=0)
    return v + 1 if v.numel() > 6 else v.flip(0)


def test_dynamo_fake_tensor_failure_runs_the_call_eagerly(caplog):
    x = torch.zeros(1, 1, dtype=torch.bool)
    want = log_softmax_of_selected(x)
    with caplog.at_level(logging.WARNING, logger="tensorplay_graph"):
        got = tpg.compile(log_softmax_of_selected, backend="reference")(x)
    assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    assert any("running this call eagerly" in r.getMessage() for r in caplog.records)


def test_dynamo_fake_tensor_failure_raises_eagers_error_when_eager_fails():
    x = torch.ones(2, 2, dtype=torch.bool)  # non-empty: eager's bool log_softmax raises
    with pytest.raises(Exception) as eager:
        log_softmax_of_selected(x)
    with pytest.raises(type(eager.value)):
        tpg.compile(log_softmax_of_selected, backend="reference")(x)


def writes_then_log_softmax_of_selected(x, acc):
    acc.add_(1)  # runs in the graph Dynamo compiles before the failing frame
    return log_softmax_of_selected(x)


def test_dynamo_fake_tensor_failure_after_an_input_write_is_not_rerun():
    x, acc = torch.zeros(1, 1, dtype=torch.bool), torch.zeros(3)
    with pytest.raises(RuntimeError, match="already written to its inputs"):
        tpg.compile(writes_then_log_softmax_of_selected, backend="reference")(x, acc)
    assert torch.equal(acc, torch.ones(3))  # written once, not twice


def scans(a, b):
    from torch._higher_order_ops.associative_scan import associative_scan
    # transformers' Mamba under a compiler: a first-order recurrence as an associative scan
    _, states = associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]),
                                 (a.sigmoid(), b), dim=1, combine_mode="generic")
    return states * 2


def conds(x):
    return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,)) + 1


@pytest.mark.parametrize("program, op", [(scans, "associative_scan"), (conds, "cond")])
def test_torch_higher_order_ops_break_the_graph(program, op):
    # torch's higher-order ops take real tensors only (associative_scan checks isinstance);
    # capture hands the program to Dynamo, which follows them, instead of failing inside torch
    args = (torch.rand(2, 5), torch.randn(2, 5))[:program.__code__.co_argcount]
    compiled = tpg.compile(program)
    assert_close(compiled(*args), program(*args))
    assert compiled.frontend == "dynamo"
    assert f"higher-order op {op}" in compiled.frontend_reason
    assert "UntraceableCallError" in compiled.explain()
    with pytest.raises(UntraceableCallError,
                       match=rf"{op} .*called at .*test_compile_graph_break.py.*fullgraph=True"):
        tpg.compile(program, fullgraph=True)(*args)


@torch.jit.script
def scaled_size(query: torch.Tensor, factor: int):  # as transformers 4.57's DeBERTa-v2 has it
    return torch.sqrt(torch.tensor(query.size(-1), dtype=torch.float) * factor)


def scripted(x):
    return x / scaled_size(x, 2)


def test_torchscript_functions_break_the_graph():
    # TorchScript checks its arguments' types (a Proxy is no Tensor); Dynamo runs its source
    x = torch.randn(3, 4)
    compiled = tpg.compile(scripted)
    assert_close(compiled(x), scripted(x))
    assert compiled.frontend == "dynamo"
    assert "TorchScript function scaled_size()" in compiled.frontend_reason
    with pytest.raises(UntraceableCallError, match=r"scaled_size\(\).*argument 'query'"):
        tpg.compile(scripted, fullgraph=True)(x)


def test_errors_inside_the_program_are_not_graph_breaks():
    def wrong(x):
        return x @ torch.ones(3, 3)  # the user's own shape error: eager raises it too

    with pytest.raises(RuntimeError, match="shapes cannot be multiplied|size mismatch"):
        tpg.compile(wrong)(torch.ones(2, 4))
