"""Each lint error: it fires on the broken invariant, names the node, and says the fix."""

import operator

import pytest

from tensorplay_graph.errors import GraphLintError
from helpers import chain
from tensorplay_graph.ir import Graph, GraphModule


def lint_error(g):
    with pytest.raises(GraphLintError) as info:
        g.lint()
    message = str(info.value)
    assert "Fix:" in message
    return message


def test_valid_graph_passes():
    g, *_ = chain()
    g.lint()


def test_use_before_definition():
    g, x, a, b, out = chain()
    a.prepend(b)  # mul now sits before add, which it reads
    message = lint_error(g)
    assert "'mul'" in message and "reads 'add' before it is defined" in message


def test_dangling_reference_to_erased_node():
    g, x, a, b, out = chain()
    b.args = (x, 2)
    g.erase_node(a)
    # forge a reference to the erased node behind the setter's back
    del x.users[b]
    b._args = (a, 2)
    b._input_nodes = {a: None}
    a.users[b] = None
    message = lint_error(g)
    assert "'mul'" in message and "erased" in message


def test_dangling_reference_to_other_graph():
    g, x, a, b, out = chain()
    other = Graph()
    y = other.placeholder("y")
    b.args = (y, 2)
    message = lint_error(g)
    assert "'mul'" in message and "another graph" in message and "node_copy" in message


def test_users_inconsistent_missing_user():
    g, x, a, b, out = chain()
    del a.users[b]
    message = lint_error(g)
    assert "'mul'" in message and "missing from add.users" in message


def test_users_inconsistent_stale_user():
    g, x, a, b, out = chain()
    x.users[b] = None  # mul does not read x
    message = lint_error(g)
    assert "'x'" in message and "does not read it" in message


def test_recorded_inputs_differ_from_args():
    g, x, a, b, out = chain()
    b._args = (x, 2)  # bypassed the setter
    message = lint_error(g)
    assert "'mul'" in message and "recorded inputs" in message


def test_missing_output():
    g = Graph()
    g.placeholder("x")
    message = lint_error(g)
    assert "exactly one output" in message and "found 0" in message


def test_two_outputs():
    g, x, a, b, out = chain()
    g.output(a)
    message = lint_error(g)
    assert "exactly one output" in message and "found 2" in message and "output_1" in message


def test_output_not_last():
    g, x, a, b, out = chain()
    g.call_function(operator.neg, (x,))
    message = lint_error(g)
    assert "'output'" in message and "not last" in message and "'neg'" in message


def test_duplicate_names():
    g, x, a, b, out = chain()
    b._name = "add"
    message = lint_error(g)
    assert "'add'" in message and "duplicate name" in message


def test_unsafe_name():
    g, x, a, b, out = chain()
    b._name = "import"
    message = lint_error(g)
    assert "'import'" in message and "safe identifier" in message


def test_bad_targets():
    g, x, a, b, out = chain()
    b._target = "relu"
    assert "not callable" in lint_error(g)
    b._target = operator.mul
    c = g.call_method("relu", (x,))
    out.prepend(c)
    c._target = "re lu"
    assert "not a method name" in lint_error(g)


def test_missing_get_attr_on_owning_module():
    g = Graph()
    w = g.get_attr("w")
    g.output(w)
    gm = GraphModule({"w": 1}, g)
    g.lint()
    del gm.w
    message = lint_error(g)
    assert "'w'" in message and "does not exist" in message


def test_placeholder_without_default_after_defaulted_one():
    g = Graph()
    g.placeholder("x", default_value=1)
    g.placeholder("y")
    g.output(None)
    message = lint_error(g)
    assert "'y'" in message and "follows placeholder 'x'" in message
