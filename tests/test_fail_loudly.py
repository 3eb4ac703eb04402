"""Misconfiguration fails at once with a message that names the fix."""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg
from tensorplay_graph.errors import UnknownBackendError, UnknownOptionError, UnsupportedOpError


def program(x):
    return (x * 2).relu()


def test_unknown_option_key_suggests_the_closest():
    with pytest.raises(UnknownOptionError, match="did you mean 'recompile_limit'"):
        tpg.compile(program, options={"recompile_limt": 3})


def test_options_must_be_a_dict_and_a_string_points_at_backend():
    with pytest.raises(TypeError, match="backend='reference'"):
        tpg.compile(program, options="reference")


@pytest.mark.parametrize("spelling", ["refrence", ["triton", "bogus"]])
def test_unknown_backend_is_a_value_error_at_compile_time(spelling):
    with pytest.raises(UnknownBackendError) as info:
        tpg.compile(program, backend=spelling)
    assert isinstance(info.value, ValueError) and not isinstance(info.value, UnsupportedOpError)
    if spelling == "refrence":
        assert "did you mean 'reference'" in str(info.value)


def test_unknown_backend_in_options_and_in_explain():
    with pytest.raises(UnknownBackendError):
        tpg.compile(program, options={"backends": ["tritn"]})
    with pytest.raises(UnknownBackendError, match="did you mean 'triton'"):
        tpg.explain(program, torch.randn(4), backend="tritn")


def test_framework_backends_check_options():
    from tensorplay_graph.compiler import torch_backend
    with pytest.raises(UnknownOptionError):
        torch_backend(None, [], options={"cuda_graph": True})


def test_cli_explain_with_a_bogus_backend_exits_non_zero(tmp_path, capsys):
    from tensorplay_graph.cli import main
    source = tmp_path / "model.py"
    source.write_text("def f(x):\n    return x * 2\n")
    code = main(["explain", f"{source}:f", "--input", "4", "--framework", "torch",
                 "--backend", "bogus"])
    assert code != 0
    assert "no backend named 'bogus'" in capsys.readouterr().err


def test_known_names_still_work():
    x = torch.randn(8)
    for backend in ("auto", "interpreter", "reference", ["reference", "interpreter"]):
        torch.testing.assert_close(tpg.compile(program, backend=backend)(x), program(x))


def test_explicit_backend_that_claims_nothing_warns(caplog):
    x = torch.randn(8)
    with caplog.at_level("WARNING", logger="tensorplay_graph.compile"):
        torch.testing.assert_close(tpg.compile(program, backend="triton")(x), program(x))
    assert any("claimed no op" in r.message and "triton" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="tensorplay_graph.compile"):
        tpg.compile(program, backend="reference")(x)
    assert not any("claimed no op" in r.message for r in caplog.records)


def test_decorator_forms():
    @tpg.compile
    def plain(x):
        return x * 3

    @tpg.compile(backend="reference", options={"recompile_limit": 2})
    def configured(x):
        return x - 1

    x = torch.randn(5)
    torch.testing.assert_close(plain(x), x * 3)
    torch.testing.assert_close(configured(x), x - 1)
    assert configured.recompile_limit == 2
    with pytest.raises(UnknownBackendError):
        tpg.compile(backend="nope")   # checked before the function arrives


def test_missing_lowering_and_out_of_order_graph_raise_our_errors():
    from tensorplay_graph import prims
    from tensorplay_graph.errors import GraphLintError, MissingLoweringError, TensorPlayGraphError
    from tensorplay_graph.interpreter import Interpreter
    from tensorplay_graph.ir.graph import Graph
    from tensorplay_graph.ir.graph_module import GraphModule

    with pytest.raises(MissingLoweringError, match="no 'nosuchbackend' lowering"):
        prims.get("add").render("nosuchbackend", a="x", b="y")

    graph = Graph()
    x = graph.placeholder("x")
    ghost = Graph().placeholder("ghost")  # a node from another graph: never given a value
    graph.output(graph.call_function(operator_add, (x, ghost)))
    with pytest.raises(TensorPlayGraphError, match="has no value yet") as info:
        Interpreter(GraphModule({}, graph)).run(1)
    assert isinstance(info.value.__cause__, GraphLintError)


def operator_add(a, b):
    return a + b
