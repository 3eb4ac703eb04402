"""Graph building and editing: users upkeep, insert points, erase, replace, copy, DCE, names."""

import operator

import pytest

from tensorplay_graph.errors import GraphLintError
from helpers import chain
from tensorplay_graph.ir import Graph, GraphModule, Namespace, map_aggregate, map_arg, sanitize


def test_builders_and_users_are_exact():
    g, x, a, b, out = chain()
    assert [n.name for n in g.nodes] == ["x", "add", "mul", "output"]
    assert len(g.nodes) == len(g) == 4
    assert list(x.users) == [a] and list(a.users) == [b] and list(b.users) == [out]
    assert a.all_input_nodes == [x]
    a.args = (x, x)  # same node twice: listed once
    assert a.all_input_nodes == [x] and list(x.users) == [a]
    b.args = (x, 3)
    assert a.users == {} and set(x.users) == {a, b}
    b.update_kwarg("alpha", a)
    assert list(a.users) == [b] and b.kwargs == {"alpha": a}
    b.update_arg(1, a)
    assert b.args == (x, a)
    g.lint()


def test_nested_args_track_users_and_are_immutable():
    g = Graph()
    x, y, z = g.placeholder("x"), g.placeholder("y"), g.placeholder("z")
    n = g.call_function(operator.getitem, (x, (slice(y, None), [z, {"k": x}])))
    assert set(n.all_input_nodes) == {x, y, z}
    assert n in y.users and n in z.users
    with pytest.raises(TypeError, match="immutable"):
        n.args[1][1].append(3)
    with pytest.raises(TypeError, match="immutable"):
        n.args[1][1][1]["k"] = 0
    mapped = map_arg(n.args, lambda node: node.name)
    assert mapped == ("x", (slice("y", None, None), ["z", {"k": "x"}]))
    assert type(mapped[1][1]) is list and type(mapped[1][1][1]) is dict
    assert map_aggregate((1, [2, 3]), lambda v: v * 10) == (10, [20, 30])


def test_inserting_before_and_after_keep_order():
    g, x, a, b, out = chain()
    with g.inserting_before(b):
        c = g.call_function(operator.neg, (a,))
        d = g.call_function(operator.abs, (c,))
    with g.inserting_after(x):
        e = g.call_function(operator.pos, (x,))
        f = g.call_function(operator.invert, (e,))
    with g.inserting_before(None):
        first = g.placeholder("first")
    assert [n.name for n in g.nodes] == ["first", "x", "pos", "invert", "add", "neg", "abs_",
                                         "mul", "output"]
    # the insert point is restored afterwards: new nodes go to the end again
    tail = g.call_function(operator.neg, (first,))
    assert g.output_node() is None and list(g.nodes)[-1] is tail
    del d, f


def test_erase_refuses_while_users_exist_and_names_them():
    g, x, a, b, out = chain()
    with pytest.raises(GraphLintError, match=r"cannot erase node add .*users \[mul\]"):
        g.erase_node(a)
    b.replace_input_with(a, x)
    g.erase_node(a)
    assert [n.name for n in g.nodes] == ["x", "mul", "output"] and a not in x.users
    with pytest.raises(GraphLintError, match="not in this graph"):
        g.erase_node(a)
    g.lint()


def test_erase_while_iterating():
    g, x, a, b, out = chain()
    b.replace_all_uses_with(x)
    for node in reversed(g.nodes):
        if node.op == "call_function":
            g.erase_node(node)
    assert [n.name for n in g.nodes] == ["x", "output"]


def test_replace_all_uses_with_and_callback():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(operator.neg, (x,))
    u1 = g.call_function(operator.add, (a, a))
    u2 = g.call_function(operator.mul, (a, 2))
    g.output((u1, u2))
    changed = a.replace_all_uses_with(x, delete_user_cb=lambda user: user is not u2)
    assert changed == [u1] and u1.args == (x, x) and list(a.users) == [u2]
    a.meta["tensor_meta"] = "m"
    assert a.replace_all_uses_with(x, propagate_meta=True) == [u2]
    assert x.meta["tensor_meta"] == "m" and not a.users


def test_node_copy_and_graph_copy():
    g, x, a, b, out = chain()
    a.meta["stack"] = "model.py:3 in f"
    h = Graph()
    y = h.placeholder("y")
    result = h.graph_copy(g, {x: y})
    h.output(result)
    names = [n.name for n in h.nodes]
    assert names == ["y", "add", "mul", "output"]
    copied_add = list(h.nodes)[1]
    assert copied_add.args == (y, 1) and copied_add.meta["stack"] == "model.py:3 in f"
    assert copied_add.meta is not a.meta
    h.lint()
    assert GraphModule({}, h)(5) == GraphModule({}, g)(5) == 12


def test_names_are_unique_safe_identifiers():
    g = Graph()
    names = [g.placeholder(n).name for n in ("x", "x", "class", "sum", "self", "9lives", "a-b")]
    assert names == ["x", "x_1", "class_", "sum_", "self_", "_9lives", "a_b"]
    n = g.call_function(operator.add, (1, 2), name="My Node!")
    assert n.name == "my_node"
    n.name = "x"
    assert n.name not in names and n.name.startswith("x_")
    assert sanitize("tensorplay.functional.add") == "tensorplay_functional_add"
    ns = Namespace()
    obj = object()
    assert ns.create_name("f", obj) == ns.create_name("other", obj) == "f"


def test_builders_validate_targets():
    g = Graph()
    with pytest.raises(ValueError, match="not callable"):
        g.call_function("relu")
    with pytest.raises(ValueError, match="method name"):
        g.call_method("not valid")
    with pytest.raises(ValueError, match="dotted identifier"):
        g.get_attr("a.b-c")
    with pytest.raises(ValueError, match="unknown op"):
        g.create_node("call_module", "fc")


def test_eliminate_dead_code_keeps_impure():
    class Impure:
        _is_impure = True

        def __call__(self, v):
            return v

    class Mutating:
        mutates_args = frozenset({"x"})

        def __call__(self, v):
            return v

    class Pure:
        mutates_args = frozenset()

        def __call__(self, v):
            return v

    g = Graph()
    x = g.placeholder("x")
    unused = g.placeholder("unused")
    g.call_function(operator.neg, (x,), name="dead")
    g.call_function(Impure(), (x,), name="impure")
    g.call_function(Mutating(), (x,), name="mutating")
    g.call_function(Pure(), (x,), name="pure")
    g.call_method("add_", (x, 1))
    g.call_method("add", (x, 1))
    g.call_function(operator.setitem, (x, 0, 1))
    g.get_attr("w")
    g.output(x)
    assert g.eliminate_dead_code() is True
    assert [n.name for n in g.nodes] == ["x", "unused", "impure", "mutating", "add_", "setitem",
                                         "output"]
    assert g.eliminate_dead_code() is False
    assert g.eliminate_dead_code(is_impure=lambda n: False) is False
    g2 = Graph()
    y = g2.placeholder("y")
    g2.call_function(operator.neg, (y,), name="kept")
    g2.output(y)
    assert g2.eliminate_dead_code(is_impure=lambda n: n.name == "kept") is False
    assert len(g2) == 3
    del unused


def test_str_table_and_find_nodes():
    from tensorplay_graph.ir import TensorMeta
    g, x, a, b, out = chain()
    a.meta["tensor_meta"] = TensorMeta((4, 8), "float32")
    text = str(g)
    header, rule, *rows = text.splitlines()
    assert header.split(" | ")[0].strip() == "name" and "shape" in header and set(rule) <= {"-", "+"}
    assert len(rows) == 4
    assert "operator.add" in rows[1] and "float32[4x8]" in rows[1] and "(%x, 1)" in rows[1]
    assert g.find_nodes(op="call_function", target=operator.mul) == [b]
    assert g.find_nodes(op="placeholder") == [x]
    assert a.format_node() == "%add : [num_users=1] = call_function[target=operator.add](args = (%x, 1), kwargs = {})"


def test_move_nodes_with_prepend_append():
    g, x, a, b, out = chain()
    c = g.call_function(operator.neg, (x,))
    a.prepend(c)
    assert [n.name for n in g.nodes] == ["x", "neg", "add", "mul", "output"]
    a.append(c)
    assert [n.name for n in g.nodes] == ["x", "add", "neg", "mul", "output"]
    assert c.prev is a and c.next is b
