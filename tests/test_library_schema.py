"""infer_schema, Library (DEF / IMPL / FRAGMENT), define / impl / impl_abstract."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import pytest

from tensorplay_graph import library as L
from test_library_helpers import fresh_ns, fw  # noqa: F401 - fixture


def test_infer_schema_types(fw):
    tensor = fw.tensor_class()

    def f(x: tensor, n: int, scale: float, flag: bool, mode: str, bias: Optional[tensor],
          sizes: List[int], pair: Tuple[tensor, tensor], seq: Sequence[float], out, *args,
          **kwargs) -> tensor:
        ...

    schema = L.infer_schema(f, mutates_args=("out",), op_name="ns::f")
    assert schema == ("ns::f(Tensor, SymInt, float, bool, str, Tensor?, SymInt[], "
                      "(Tensor, Tensor), float[], Tensor(a!)) -> Tensor")


def test_infer_schema_defaults():
    def g(x, y):
        ...

    def h(x) -> None:
        ...

    assert L.infer_schema(g, mutates_args=()) == "g(Tensor, Tensor) -> Tensor"
    assert L.infer_schema(g, mutates_args=("x", "y")) == "g(Tensor(a!), Tensor(b!)) -> Tensor"
    assert L.infer_schema(h, mutates_args=(), op_name="ns::h") == "ns::h(Tensor) -> ()"


def test_infer_schema_errors():
    with pytest.raises(TypeError, match="mutates_args"):
        L.infer_schema(lambda x: x, mutates_args="x")
    with pytest.raises(ValueError, match="not parameters"):
        L.infer_schema(lambda x: x, mutates_args=("y",))
    with pytest.raises(TypeError, match="callable"):
        L.infer_schema(3, mutates_args=())
    with pytest.raises(ValueError):
        L.infer_schema(lambda x: x, mutates_args=(), op_name="bad::name::x")


def test_library_define_and_impl(fw):
    ns = fresh_ns()
    lib = L.Library(ns, "DEF")
    assert repr(lib) == f"<Library ns={ns!r} kind=DEF>"
    lib.define(f"{ns}::add(Tensor x, Tensor y) -> Tensor")
    lib.define("mul(Tensor x, Tensor y) -> Tensor")  # the namespace is implied
    lib.impl("add", lambda x, y: x + y, device_type="cpu")

    @lib.impl(f"{ns}::mul", dispatch_key="CPU")
    def mul(x, y):
        return x * y

    lib.impl("mul", lambda x, y: x * y * 100)  # composite default: the fallback slot
    x = fw.tensor([2.0])
    assert fw.np(L.get_op(f"{ns}::add")(x, x)).tolist() == [4.0]
    assert fw.np(L.get_op(f"{ns}::mul")(x, x)).tolist() == [4.0]
    assert L.get_op(f"{ns}::add").schema == f"{ns}::add(Tensor x, Tensor y) -> Tensor"
    assert L.get_op(f"{ns}::mul").schema == f"{ns}::mul(Tensor x, Tensor y) -> Tensor"
    assert fw.np(L.get_kernel(f"{ns}::mul", "default")(x, x)).tolist() == [400.0]


def test_library_rules():
    ns = fresh_ns()
    lib = L.Library(ns, "DEF")
    with pytest.raises(RuntimeError, match="single DEF Library"):
        L.Library(ns, "DEF")
    with pytest.raises(ValueError, match="unknown Library kind"):
        L.Library(ns, "BOGUS")
    with pytest.raises(ValueError, match="identifier"):
        L.Library("not an id", "DEF")
    lib.define(f"{ns}::op(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match="already defined"):
        lib.define(f"{ns}::op(Tensor x) -> Tensor")
    fragment = L.Library(ns, "FRAGMENT")
    fragment.define(f"{ns}::op(Tensor x) -> Tensor")  # fragments may re-declare
    fragment.define(f"{ns}::other(Tensor x) -> Tensor")
    assert L.has_op(f"{ns}::other")
    with pytest.raises(ValueError, match="does not match library namespace"):
        fragment.define("elsewhere::op(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match="schema must look like"):
        fragment.define("no parens")
    with pytest.raises(TypeError, match="device_type must be a str"):
        fragment.impl("op", lambda x: x, device_type=None)
    with pytest.raises(TypeError, match="kernel must be callable"):
        fragment.impl("op", 3)
    with pytest.raises(RuntimeError, match="unknown operator"):
        fragment.impl("missing", lambda x: x)
    with pytest.raises(NotImplementedError, match="fallback is not supported"):
        fragment.fallback("CPU")
    impl_lib = L.Library(ns, "IMPL")
    impl_lib.impl("op", lambda x: x)
    with pytest.raises(RuntimeError, match="already defined"):
        impl_lib.define(f"{ns}::op(Tensor x) -> Tensor")


def test_module_level_define_impl_impl_abstract(fw):
    ns = fresh_ns()
    L.define(f"{ns}::sq(Tensor x) -> Tensor")  # the full string pasted as qualname
    op = L.get_op(f"{ns}::sq")
    assert op.schema == f"{ns}::sq(Tensor x) -> Tensor"
    L.impl(f"{ns}::sq", "CPU", lambda x: x * x)

    @L.impl(f"{ns}::sq", "CompositeImplicitAutograd")
    def default(x):
        return x * x * 0

    @L.impl_abstract(f"{ns}::sq")
    def fake(x):
        return x.new_empty(x.shape)

    assert fw.np(op(fw.tensor([3.0]))).tolist() == [9.0]
    assert op.has_fake and L.get_kernel(op, "default") is default
    L.define(f"{ns}::sq", "(Tensor x) -> Tensor")  # re-define keeps the op, updates the schema
    assert L.get_op(f"{ns}::sq") is op and op.schema == "(Tensor x) -> Tensor"
    L.define(f"{ns}::plain")
    assert L.get_op(f"{ns}::plain").schema is None
    with pytest.raises(ValueError):
        L.define("no_namespace")
    with pytest.raises(ValueError):
        L.define(f"{ns}::bad", "garbage")
