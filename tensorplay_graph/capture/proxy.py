"""``Proxy``: the stand-in for a tensor while a program is captured.

Every operation on a Proxy records one node in the tracer's graph and returns
a new Proxy. When the trace runs with example inputs, each Proxy also carries
the real value computed alongside, so metadata queries (``.shape``,
``.size()``, ``.dim()``, ``.dtype``, ``len()``) answer with real values and
never become nodes. Reading tensor *data* into Python (``bool``, ``.item()``)
cannot be captured and raises :class:`GraphCaptureError`.
"""

from __future__ import annotations

import builtins
import operator
import os
import re
from typing import Any, Iterator

from ..errors import GraphCaptureError
from .context import raise_location, tracer_of, user_source_line

class GraphBreakError(GraphCaptureError):
    """Capture cannot follow the program past this point.

    ``tensorplay_graph.compile`` answers it with a graph break: the program is
    handed to the framework's own frontend (Dynamo, ``tp.compile``), unless
    ``fullgraph=True``.
    """


class DataDependentError(GraphBreakError):
    """The program reads tensor data into Python (``if x.sum() > 0``, ``.item()``)."""


class UntraceableCallError(GraphBreakError):
    """The program calls a function that runs only on real tensors: torch's higher-order
    ops (``associative_scan``, ``scan``, ``cond``, ``while_loop``, ``map``), which Dynamo
    follows and this tracer's proxies cannot enter."""


_HIGHER_ORDER_OPS = os.sep + os.path.join("torch", "_higher_order_ops") + os.sep


#: TorchScript's argument check, the first line of its error (``torch.jit.script`` functions
#: take no ``__torch_function__`` objects): the function and the argument
_SCRIPT_ARGUMENT = re.compile(r"(\w+)\(\) Expected a value of type '[^']*' for argument "
                              r"'(\w+)' but instead found type 'Proxy'")


def untraceable_call(error: BaseException) -> "UntraceableCallError | None":
    """``error`` as an :class:`UntraceableCallError` when code that takes real tensors only
    raised it on the proxies it was given -- torch's higher-order ops (``associative_scan``
    checks ``isinstance(x, Tensor)``), a TorchScript function (DeBERTa-v2's
    ``scaled_size_sqrt``) -- naming it and the program's call site; None for any other
    error."""
    script = _SCRIPT_ARGUMENT.match(str(error)) if isinstance(error, RuntimeError) else None
    if script is not None:
        return UntraceableCallError(
            f"TorchScript function {script[1]}() (torch.jit.script), called at "
            f"{raise_location(error)}, takes real tensors (argument {script[2]!r}) and cannot "
            "be captured by tensorplay_graph's tracer. tensorplay_graph.compile hands such "
            "programs to Dynamo (a graph break), which runs its Python source; with "
            "fullgraph=True, call torch.compile(fn, backend='tensorplay_graph') instead")
    tb, caller = error.__traceback__, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if _HIGHER_ORDER_OPS in code.co_filename:
            return UntraceableCallError(
                f"torch's higher-order op {code.co_name} (torch._higher_order_ops), called at "
                f"{user_source_line(caller)}, runs only on real tensors and cannot be captured "
                f"by tensorplay_graph's tracer (it raised {type(error).__name__}: {error}). "
                "tensorplay_graph.compile hands such programs to Dynamo (a graph break); with "
                "fullgraph=True, call torch.compile(fn, backend='tensorplay_graph') instead")
        caller, tb = tb.tb_frame, tb.tb_next
    return None


def run_program(function: Any, args: tuple, kwargs: dict) -> Any:
    """``function(*args, **kwargs)`` under a trace; an error from code that takes real tensors
    only becomes its :class:`UntraceableCallError` (:func:`untraceable_call`)."""
    try:
        return function(*args, **kwargs)
    except Exception as error:
        untraceable = untraceable_call(error)
        if untraceable is None:
            raise
        raise untraceable from error


def made_tensor_write(name: str, location: str) -> DataDependentError:
    """A write of traced values into a tensor the program made (a lifted ``_const``): later
    native uses of that tensor would read its capture-time value. Dynamo can follow it;
    ``tp.compile`` cannot, so TensorPlay programs run eagerly (``eager_for_tensorplay``)."""
    error = DataDependentError(f"{name} writes traced values into a tensor made inside the "
                               f"program ({location}); capture cannot follow it")
    error.eager_for_tensorplay = True  # type: ignore[attr-defined]
    return error


def varying_shape(proxy: "Proxy", what: str) -> DataDependentError:
    """Python reads the shape of a value whose shape depends on tensor data (``x[mask]``,
    ``nonzero``): a graph specialised on it is wrong for the next call. Dynamo can follow
    it; ``tp.compile`` specialises it too, so TensorPlay programs run eagerly."""
    error = DataDependentError(
        f"{what} of traced tensor {proxy.node.name!r} at {user_source_line()}: its shape "
        f"depends on tensor data (a boolean mask, nonzero, unique), so it changes from call "
        f"to call with the same input shapes; keep the size in tensors (e.g. mask.sum()) "
        f"instead of Python numbers")
    error.eager_for_tensorplay = True  # type: ignore[attr-defined]
    return error


#: Sentinel for "this proxy has no example value".
MISSING = object()

#: Metadata attributes: answered from the example value when there is one.
META_ATTRS = frozenset({
    "shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "is_cpu", "layout",
    "is_leaf", "is_sparse", "is_quantized", "is_meta", "is_nested", "itemsize", "nbytes",
})
#: Metadata methods: called on the example value when there is one.
META_METHODS = frozenset({
    "size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous",
    "element_size", "is_floating_point", "is_complex", "get_device", "storage_offset",
})
#: Metadata methods whose answer is the shape (or follows from it).
SHAPE_METHODS = frozenset({"size", "numel", "nelement"})
#: Tensor-valued properties: recorded as ``getattr(x, name)`` nodes.
TENSOR_PROPERTIES = frozenset({"T", "mT", "H", "mH", "real", "imag", "data", "grad"})
#: Methods that move data into Python.
DATA_METHODS = frozenset({"item", "tolist", "numpy", "__array__", "data_ptr"})

_WAY_OUT = ("use tensor operations instead (tensorplay.where / torch.where for a per-element "
            "choice), register a custom op for the code that needs Python values, "
            "or mark the value as a constant (pass it as a non-tensor argument)")


class Proxy:
    """A traced value: ``node`` in ``tracer``'s graph, plus its example value if known.

    >>> gm = tensorplay_graph.capture(lambda x: x.relu() + 1, tp.randn(4))   # doctest: +SKIP
    """

    # __weakref__: modules keep weak references to their weights (TensorPlay's LSTM).
    __slots__ = ("node", "tracer", "example", "__weakref__")

    def __init__(self, node: Any, tracer: Any, example: Any = MISSING) -> None:
        self.node = node
        self.tracer = tracer
        self.example = example

    def __repr__(self) -> str:
        return f"Proxy({self.node.name})"

    __hash__ = object.__hash__

    # -- framework hooks -------------------------------------------------

    @classmethod
    def __tensorplay_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _dispatch(_resolver("tensorplay")(func, args, kwargs or {}))

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return _dispatch(_resolver("torch")(func, args, kwargs or {}))

    # -- attributes and methods ------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_pybind11"):
            raise AttributeError(name)
        if name in DATA_METHODS:
            raise _data_error(self, f".{name}()")
        example = self.example
        if name in META_ATTRS and self.node in self.tracer.unknown.varying and (
                name == "shape" or example is MISSING):
            raise varying_shape(self, f".{name}")
        if name in META_ATTRS and example is not MISSING:
            return getattr(example, name)
        if example is not MISSING and isinstance(example, tuple):
            fields = getattr(type(example), "__match_args__", ())
            if name in fields:
                return self[fields.index(name)]
        elif example is MISSING:
            # No example (a fake's data-shaped reader, an op without a fake): the op and its
            # arguments tell; else `.indices` became a bound method (seed 60013227).
            fields = self.tracer.result_fields(self.node)
            if name in fields:
                return self[fields.index(name)]
        if name in META_ATTRS or name in TENSOR_PROPERTIES:
            return self.tracer.create_proxy("call_function", builtins.getattr, (self, name), {})
        self._check_attribute(name)
        return _Method(self, name)

    def _check_attribute(self, name: str) -> None:
        """Unknown names fail like on a real tensor (``hasattr`` probes rely on it)."""
        tensor_type = self.tracer.tensor_type(self)
        if tensor_type is not None and not hasattr(tensor_type, name):
            raise AttributeError(f"'{tensor_type.__name__}' object has no attribute '{name}' "
                                 f"(traced value {self.node.name!r})")
        if tensor_type is None and name.startswith("_"):
            raise AttributeError(name)

    def __len__(self) -> int:
        if self.node in self.tracer.unknown.varying:
            raise varying_shape(self, "len()")
        if self.example is MISSING:
            fields = self.tracer.result_fields(self.node)
            if fields:
                return len(fields)
            raise GraphCaptureError(
                f"len() of traced value {self.node.name!r} at {user_source_line()}: its length is "
                "unknown without example inputs; pass example inputs to capture() or use "
                ".shape[0] / .size(0) on a value with a known shape")
        return len(self.example)

    def __iter__(self) -> Iterator["Proxy"]:
        if self.node in self.tracer.unknown.varying:
            raise varying_shape(self, "iteration")
        if self.example is MISSING:
            fields = self.tracer.result_fields(self.node)  # TensorPlay's max(x, dim=): *values
            if fields:
                return (self[i] for i in range(len(fields)))
            raise GraphCaptureError(
                f"cannot iterate traced value {self.node.name!r} of unknown length at "
                f"{user_source_line()}; pass example inputs to capture() so lengths are known, "
                "index the parts explicitly (x[0], x[1]), or use split/unbind with a fixed count")
        return (self[i] for i in range(len(self.example)))

    # -- Python control flow and data reads: not capturable ---------------

    def __bool__(self) -> bool:
        raise DataDependentError(
            f"data-dependent control flow at {user_source_line()}: Python needs the truth value "
            f"of traced tensor {self.node.name!r}, which is only known at run time. "
            "Use tensorplay.where(cond, a, b) (torch.where for torch) to choose per element, "
            "register a custom op for the whole branch, or mark the condition as a constant "
            "(pass it as a non-tensor argument)")

    def __int__(self) -> int:
        raise _data_error(self, "int()")

    def __float__(self) -> float:
        raise _data_error(self, "float()")

    def __index__(self) -> int:
        raise _data_error(self, "use as a Python index")

    def __complex__(self) -> complex:
        raise _data_error(self, "complex()")

    def __contains__(self, item: Any) -> bool:
        raise _data_error(self, "the `in` operator")

    # -- indexing --------------------------------------------------------

    def __getitem__(self, index: Any) -> "Proxy":
        return self.tracer.create_proxy("call_function", operator.getitem, (self, index), {})

    def __setitem__(self, index: Any, value: Any) -> None:
        self.tracer.create_proxy("call_function", operator.setitem, (self, index, value), {})


class _Method:
    """A bound tensor method of a proxy; calling it records one ``call_method`` node."""

    __slots__ = ("proxy", "name")

    def __init__(self, proxy: Proxy, name: str) -> None:
        self.proxy = proxy
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        proxy = self.proxy
        if self.name in META_METHODS and proxy.node in proxy.tracer.unknown.varying and (
                self.name in SHAPE_METHODS or proxy.example is MISSING):
            raise varying_shape(proxy, f".{self.name}()")
        if self.name in META_METHODS and proxy.example is not MISSING:
            return getattr(proxy.example, self.name)(*args, **kwargs)
        return proxy.tracer.create_proxy("call_method", self.name, (proxy,) + args, kwargs)

    def __repr__(self) -> str:
        return f"<traced method {self.name} of {self.proxy!r}>"


def _data_error(proxy: Proxy, what: str) -> GraphCaptureError:
    return DataDependentError(
        f"{what} on traced tensor {proxy.node.name!r} at {user_source_line()} reads tensor data "
        f"into Python, which cannot be captured; {_WAY_OUT}")


_RESOLVERS: dict = {}


def _resolver(framework: str) -> Any:
    """``capture.hooks.<framework>.resolve_function``, imported on first use (once per node)."""
    found = _RESOLVERS.get(framework)
    if found is None:
        from .hooks import hooks_for

        found = _RESOLVERS[framework] = hooks_for(framework).resolve_function
    return found


def _dispatch(resolved: Any) -> Any:
    """Record a call resolved by a framework's trace hooks: ``(kind, target, args, kwargs)``.

    ``kind`` ``"operator"`` means: apply the Python operator ``target`` to the
    args with real tensors lifted to constants, so the proxy's own operator
    methods record the node (used for ``real_tensor + proxy``).
    """
    kind, target, args, kwargs = resolved
    tracer = tracer_of(args, kwargs)
    if kind == "operator":
        return target(*[tracer.lift(arg) for arg in args])
    return tracer.create_proxy(kind, target, tuple(args), dict(kwargs))


def _binary(op: Any, reflected: bool = False) -> Any:
    if reflected:
        def method(self: Proxy, other: Any) -> Proxy:
            return self.tracer.create_proxy("call_function", op, (other, self), {})
    else:
        def method(self: Proxy, other: Any) -> Proxy:
            return self.tracer.create_proxy("call_function", op, (self, other), {})
    return method


def _unary(op: Any) -> Any:
    def method(self: Proxy) -> Proxy:
        return self.tracer.create_proxy("call_function", op, (self,), {})
    return method


#: Python operators recorded with ``operator.*`` targets (reflected ones swap the args).
BINARY_OPERATORS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
    "pow": operator.pow, "matmul": operator.matmul, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift,
    "rshift": operator.rshift,
}
COMPARISONS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
               "eq": operator.eq, "ne": operator.ne}
INPLACE_OPERATORS = {
    "iadd": operator.iadd, "isub": operator.isub, "imul": operator.imul,
    "itruediv": operator.itruediv, "ifloordiv": operator.ifloordiv, "imod": operator.imod,
    "ipow": operator.ipow, "imatmul": operator.imatmul, "iand": operator.iand,
    "ior": operator.ior, "ixor": operator.ixor,
    # Without these, ``x <<= y`` fell back to ``__lshift__``: a new value, aliases of x stale.
    "ilshift": operator.ilshift, "irshift": operator.irshift,
}
UNARY_OPERATORS = {"neg": operator.neg, "pos": operator.pos, "invert": operator.invert,
                   "abs": operator.abs}

for _name, _op in BINARY_OPERATORS.items():
    setattr(Proxy, f"__{_name}__", _binary(_op))
    setattr(Proxy, f"__r{_name}__", _binary(_op, reflected=True))
for _name, _op in {**COMPARISONS, **INPLACE_OPERATORS}.items():
    setattr(Proxy, f"__{_name}__", _binary(_op))
for _name, _op in UNARY_OPERATORS.items():
    setattr(Proxy, f"__{_name}__", _unary(_op))
