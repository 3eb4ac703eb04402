"""Definitions, validation, the registry, the ops namespace and thread safety."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest

import tensorplay_graph
from tensorplay_graph import library as L
from test_library_helpers import fresh_ns, fw  # noqa: F401 - fixture


@pytest.mark.parametrize("definer, kind", [(L.custom_op, "custom_op"), (L.triton_op, "triton_op"),
                                           (L.tile_lang_op, "tile_lang_op")])
def test_definers_as_decorator_and_positional(fw, definer, kind):
    ns = fresh_ns()

    @definer(f"{ns}::twice", mutates_args=())
    def twice(x):
        return x * 2

    plus = definer(f"{ns}::plus", lambda x, y: x + y, mutates_args=())
    assert isinstance(twice, L.CustomOpDef)
    assert repr(twice) == f"<{kind} {ns}::twice>"
    assert (twice.name, twice.namespace, twice.opname) == (f"{ns}::twice", ns, "twice")
    assert twice.is_triton_op == (kind == "triton_op")
    assert twice.is_tile_lang_op == (kind == "tile_lang_op")
    assert twice.mutates_args == frozenset()
    x = fw.tensor([1.0, 2.0])
    assert fw.np(twice(x)).tolist() == [2.0, 4.0]
    assert fw.np(plus(x, x)).tolist() == [2.0, 4.0]
    assert L.get_op(f"{ns}::twice") is twice and L.has_op(f"{ns}::plus")
    assert twice in L.all_ops()


@pytest.mark.parametrize("name, error", [
    (3, TypeError), ("noqualifier", ValueError), ("a::b::c", ValueError), ("::x", ValueError),
    ("ns::", ValueError), ("1ns::op", ValueError), ("ns::op-x", ValueError),
])
def test_bad_names(name, error):
    with pytest.raises(error):
        L.custom_op(name, mutates_args=())


@pytest.mark.parametrize("mutates, error", [("x", TypeError), (3, TypeError), ((1,), TypeError)])
def test_bad_mutates_args(mutates, error):
    with pytest.raises(error, match="mutates_args"):
        L.custom_op(f"{fresh_ns()}::op", mutates_args=mutates)


def test_mutated_name_must_be_a_parameter():
    with pytest.raises(ValueError, match="not parameters"):
        L.custom_op(f"{fresh_ns()}::op", lambda x, out: None, mutates_args=("ouy",))


def test_device_types_must_be_strings():
    with pytest.raises(TypeError, match="device types must be strings"):
        L.custom_op(f"{fresh_ns()}::op", mutates_args=(), device_types=[1])


def test_duplicate_definition_names_get_op():
    ns = fresh_ns()
    L.custom_op(f"{ns}::op", lambda x: x, mutates_args=())
    with pytest.raises(RuntimeError, match=r"get_op\("):
        L.custom_op(f"{ns}::op", lambda x: x, mutates_args=())


@pytest.mark.parametrize("schema", ["(Tensor x) -> Tensor", "{ns}::op(Tensor x) -> Tensor",
                                    "{ns}::op(Tensor x, SymInt n) -> (Tensor, Tensor)"])
def test_schema_accepted(schema):
    ns = fresh_ns()
    op = L.custom_op(f"{ns}::op", lambda x: x, mutates_args=(), schema=schema.format(ns=ns))
    assert op.schema == schema.format(ns=ns)


@pytest.mark.parametrize("schema, error", [("Tensor x -> Tensor", ValueError),
                                           ("bad name(Tensor x) -> Tensor", ValueError),
                                           ("(Tensor x)", ValueError), (5, TypeError),
                                           ("other::op(Tensor x) -> Tensor", ValueError)])
def test_schema_rejected(schema, error):
    with pytest.raises(error):
        L.custom_op(f"{fresh_ns()}::op", lambda x: x, mutates_args=(), schema=schema)


def test_unknown_op_lookups():
    with pytest.raises(RuntimeError, match="unknown operator"):
        L.get_op(f"{fresh_ns()}::missing")
    with pytest.raises(TypeError):
        L.get_op(3)
    assert not L.has_op(f"{fresh_ns()}::missing")
    with pytest.raises(TypeError, match="expected an operator name"):
        L.register_fake(3.0, lambda x: x)


def test_ops_namespace(fw):
    ns = fresh_ns()
    namespace = getattr(tensorplay_graph.ops, ns)  # resolved before the op exists
    op = L.custom_op(f"{ns}::neg", lambda x: -x, mutates_args=())
    assert namespace.neg is op and getattr(tensorplay_graph.ops, ns).neg is op
    assert fw.np(namespace.neg(fw.tensor([1.0]))).tolist() == [-1.0]
    assert "neg" in dir(namespace)
    with pytest.raises(AttributeError, match="no operator"):
        namespace.nope
    with pytest.raises(AttributeError):
        tensorplay_graph.ops.__wrapped__


def test_ops_are_singletons_through_copy_and_pickle():
    op = L.custom_op(f"{fresh_ns()}::ident", lambda x: x, mutates_args=())
    assert copy.copy(op) is op and copy.deepcopy(op) is op
    assert pickle.loads(pickle.dumps(op)) is op


def test_eight_threads_register_200_ops(fw):
    ns = fresh_ns()
    errors = []

    def worker(index):
        try:
            for j in range(25):
                op = L.custom_op(f"{ns}::op_{index}_{j}", lambda x, k=j: x + k, mutates_args=())
                op.register_kernel("cpu", lambda x, k=j: x + k)
                op.register_fake(lambda x: x)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    ops = [op for op in L.all_ops() if op.namespace == ns]
    assert len(ops) == 200
    x = fw.tensor([0.0])
    assert fw.np(L.get_op(f"{ns}::op_7_24")(x)).tolist() == [24.0]


def test_concurrent_duplicate_definition_keeps_one():
    ns = fresh_ns()
    wins, losses = [], []

    def worker():
        try:
            wins.append(L.custom_op(f"{ns}::same", lambda x: x, mutates_args=()))
        except RuntimeError:
            losses.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and len(losses) == 7
    assert L.get_op(f"{ns}::same") is wins[0]


def test_import_needs_no_framework():
    import subprocess
    import sys

    code = ("import sys, tensorplay_graph.library, tensorplay_graph.ops; "
            "assert 'torch' not in sys.modules and 'tensorplay' not in sys.modules; "
            "op = tensorplay_graph.library.custom_op('a::b', lambda x: x + 1, mutates_args=()); "
            "assert op(1) == 2")
    subprocess.run([sys.executable, "-c", code], check=True)
