"""Every GraphCaptureError case: the message names the user's source line and the way out."""

import re

import pytest

tp = pytest.importorskip("tensorplay")
torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph import GraphCaptureError  # noqa: E402

FRAMEWORKS = {"tensorplay": lambda *s: tp.randn(*s), "torch": lambda *s: torch.randn(*s)}


@pytest.fixture(params=sorted(FRAMEWORKS))
def randn(request):
    return FRAMEWORKS[request.param]


def capture_error(fn, *inputs):
    with pytest.raises(GraphCaptureError) as info:
        tpg.capture(fn, *inputs)
    return str(info.value)


def assert_names_line(message, source_text):
    """The message carries this file, a line number and the offending source text."""
    assert re.search(re.escape(__file__) + r":\d+ in \w+", message), message
    assert source_text in message, message


def test_bool_of_proxy_is_data_dependent_control_flow(randn):
    def fn(x):
        if x.sum() > 0:
            return x
        return -x
    message = capture_error(fn, randn(3))
    assert_names_line(message, "if x.sum() > 0:")
    assert "data-dependent control flow" in message and "'gt'" in message
    assert "tensorplay.where" in message and "register a custom op" in message and "constant" in message


def test_while_loop_on_tensor_condition(randn):
    def fn(x):
        while (x < 10).all():
            x = x * 2
        return x
    assert_names_line(capture_error(fn, randn(3)), "while (x < 10).all():")


@pytest.mark.parametrize("read, text", [
    (lambda x: x * x.sum().item(), ".item()"),
    (lambda x: x.tolist(), ".tolist()"),
    (lambda x: x.numpy(), ".numpy()"),
    (lambda x: x * float(x.mean()), "float()"),
    (lambda x: x * int(x.sum()), "int()"),
    (lambda x: [1, 2, 3][x.argmax()], "use as a Python index"),
    (lambda x: 1.0 in x, "the `in` operator"),
])
def test_reading_data_into_python(randn, read, text):
    message = capture_error(read, randn(3))
    assert text in message and "reads tensor data into Python" in message
    assert "register a custom op" in message and "constant" in message
    assert re.search(re.escape(__file__) + r":\d+ in <lambda>", message), message


def test_iterating_a_proxy_of_unknown_length():
    def fn(x):
        return [row * 2 for row in x]
    message = capture_error(fn)  # no example inputs: the length is unknown
    assert_names_line(message, "return [row * 2 for row in x]")
    assert "unknown length" in message and "pass example inputs" in message


def test_len_of_a_proxy_without_examples():
    message = capture_error(lambda x: x.reshape(len(x), -1))
    assert "len()" in message and "pass example inputs" in message


def test_iteration_with_known_length_is_unrolled(randn):
    gm = tpg.capture(lambda x: sum(row * 2 for row in x), randn(3, 2))
    assert len(gm.graph.find_nodes(op="call_function", target=__import__("operator").getitem)) == 3


def test_tracer_trace_refuses_varargs_and_names_the_way_out():
    with pytest.raises(GraphCaptureError) as info:
        tpg.Tracer().trace(lambda *xs: xs[0], sample_inputs={})
    assert "*xs" in str(info.value) and "trace_call" in str(info.value)


def test_capture_binds_varargs_as_called():
    x, y = tp.randn(2), tp.randn(2)
    gm = tpg.capture(lambda *xs: xs[0] * xs[1], x, y)
    assert [n.target for n in gm.graph.nodes if n.op == "placeholder"] == ["xs_0", "xs_1"]
    assert tp.allclose(gm(x, y), x * y)


def test_raw_tensorplay_triton_launch_is_refused():
    class Launcher:  # grid-indexable stand-in for a @triton.jit kernel
        def __getitem__(self, grid):
            return lambda *args: None

    def fn(x):
        return tp.library.wrap_triton(Launcher())[(1,)](x, 4)
    message = capture_error(fn, tp.randn(4))
    assert "raw Triton launch" in message and "triton_op" in message
    assert_names_line(message, "wrap_triton(Launcher())")


class Carrier(Exception):
    pass


def test_proxies_from_two_traces_do_not_mix():
    leaked = []
    # Storing a traced value outside the program is refused (it would outlive the trace),
    # and the store is undone ...
    assert "closure variable leaked[0]" in capture_error(lambda x: leaked.append(x) or x,
                                                         tp.randn(2))
    assert leaked == []

    # ... and a proxy carried out of a finished trace (here by an exception) cannot join
    # another one
    def carries(x):
        raise Carrier(x * 2)

    with pytest.raises(Carrier) as info:
        tpg.capture(carries, tp.randn(2))
    message = capture_error(lambda y: tp.add(y, info.value.args[0]), tp.randn(2))
    assert "two different traces" in message


class Registry:
    items = []


def registers(x):
    Registry.items.append(x * 2)
    return x


def test_a_store_into_a_class_attribute_is_undone_and_named():
    # before: the capture succeeded and Registry.items kept a placeholder
    assert "global Registry.items[0]" in capture_error(registers, tp.randn(2))
    assert Registry.items == []


def test_unknown_attribute_is_an_attribute_error(randn):
    def fn(x):
        return x.not_a_tensor_method()
    with pytest.raises(AttributeError, match="not_a_tensor_method"):
        tpg.capture(fn, randn(2))


def test_eager_failure_names_the_node(randn):
    def fn(x, y):
        return x @ y
    with pytest.raises(Exception) as info:
        tpg.capture(fn, randn(2, 3), randn(2, 3))
    notes = "".join(getattr(info.value, "__notes__", []))
    assert "'matmul'" in notes and "in fn" in notes


def test_mixed_framework_inputs_are_refused_with_the_fix():
    torch = pytest.importorskip("torch")
    tp = pytest.importorskip("tensorplay")
    with pytest.raises(GraphCaptureError, match=r"'b' is a tensorplay tensor.*from_dlpack"):
        tpg.capture(lambda a, b: a + b, torch.randn(2), tp.randn(2))


def test_capture_is_the_function_after_its_subpackage_is_imported():
    import importlib
    importlib.import_module("tensorplay_graph.capture.importers")
    from tensorplay_graph.capture import api, importers
    assert callable(tpg.capture) and tpg.capture is api.capture
    assert callable(importers.import_fx_graph)
