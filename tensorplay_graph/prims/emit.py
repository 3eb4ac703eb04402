"""The emitter VJP rules write the backward graph with: prim calls as ordinary graph nodes.

``e.mul(g, b)`` appends one node whose target is the program's framework spelling of the
prim (``x.mul(y)``, ``torch.where``), so the backward graph is a normal program: ``normalize``
maps each node back to its prim, the pipeline fuses and lowers it, and the interpreter can
run it eagerly. Every emitted node carries its ``tensor_meta`` from the prim's meta rule, so
rules can read shapes (``e.meta(x).shape``) while the graph is built.

>>> e = Emitter(graph, "torch")                      # doctest: +SKIP
>>> grad_a = e.mul(grad, e.cos(a))                   # doctest: +SKIP
"""

from __future__ import annotations

import functools
import importlib
import operator
from typing import Any, Sequence, Tuple

from .. import prims
from ..ir.meta import TensorMeta, tensor_meta_of
from ..ir.node import Node
from .rules import framework_rules, reduction_dims

__all__ = ["Emitter", "NotDifferentiable", "OPAQUE"]


class NotDifferentiable(Exception):
    """A VJP rule cannot differentiate this call (the message says why): eager autograd runs."""


class _Opaque:
    def __repr__(self) -> str:
        return "OPAQUE"


#: Returned by a VJP rule: differentiate this node with the framework's own autograd,
#: kept as one opaque node in each graph (dropout in training, convolution, batch norm).
OPAQUE = _Opaque()

# Prims emitted as Tensor methods with their operands in canonical order.
_METHODS = {"neg", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh",
            "sigmoid", "relu", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt",
            "le", "gt", "ge", "matmul", "bmm", "logical_and", "logical_not"}

_OPERATORS = {"mul": operator.mul, "div": operator.truediv, "pow": operator.pow}


def _module(framework: str, suffix: str = "") -> Any:
    return importlib.import_module(framework + suffix)


class Emitter:
    """Appends prim calls to ``graph`` (at its current insert point) for ``framework``."""

    def __init__(self, graph: Any, framework: str) -> None:
        self.graph, self.framework = graph, framework
        self.fw = _module(framework)
        self.F = _module(framework, ".nn.functional")

    # -- reading -----------------------------------------------------------------------
    #: The TensorMeta of a node (``None`` for scalars and non-tensor nodes).
    meta = staticmethod(tensor_meta_of)

    def shape(self, value: Any) -> Tuple[int, ...]:
        meta = self.meta(value)
        return () if meta is None else meta.shape

    def dtype(self, value: Any) -> str:
        meta = self.meta(value)
        if meta is None:
            raise NotDifferentiable(f"{value!r} has no tensor metadata")
        return meta.dtype

    # -- emitting ----------------------------------------------------------------------
    def prim(self, name: str, *args: Any, **kwargs: Any) -> Node:
        """One node computing prim ``name`` (canonical arguments); its meta is set."""
        prim = prims.get(name)
        canon = prim.bind(args, kwargs)
        op, target, fargs, fkwargs = self._spell(name, canon)
        node = self.graph.create_node(op, target, fargs, fkwargs)
        node.meta["prim"], node.meta["prim_args"] = prim, canon
        metas = {k: (self.meta(v) if isinstance(v, Node) else v) for k, v in canon.items()}
        with framework_rules(self.framework):
            node.meta["tensor_meta"] = prim.meta(**metas)
        return node

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return functools.partial(self.prim, name)

    def _spell(self, name: str, c: dict) -> Tuple[str, Any, tuple, dict]:
        a = c.get("a")
        if not isinstance(a, Node) and name in _OPERATORS:  # scalar first: ``2.0 ** x``
            return "call_function", _OPERATORS[name], (a, c["b"]), {}
        if name in _METHODS:
            # the second operand positionally; later arguments only when not at their
            # default, by name (``rounding_mode``): the frameworks' positions differ there
            keys = list(c)
            rest = tuple(c[k] for k in keys[1:2])
            kwargs = {k: c[k] for k in keys[2:] if c[k] is not None}
            return "call_method", name, (a,) + rest, kwargs
        if name in ("add", "sub"):
            kwargs = {} if c["alpha"] == 1 else {"alpha": c["alpha"]}
            return "call_method", name, (a, c["b"]), kwargs
        if name == "where":
            return "call_function", self.fw.where, (c["cond"], a, c["b"]), {}
        if name in ("gelu", "silu", "softmax", "log_softmax"):
            kwargs = {"approximate": c["approximate"]} if name == "gelu" else \
                {"dim": c["dim"]} if "dim" in c else {}
            return "call_function", getattr(self.F, name), (a,), kwargs
        if name == "cast":
            return "call_method", "to", (a, getattr(self.fw, c["dtype"])), {}
        if name in ("sum", "mean", "amax", "amin"):
            kwargs = {} if c["dim"] is None else {"dim": _dims(c["dim"]), "keepdim": c["keepdim"]}
            if c.get("dtype") is not None:
                kwargs["dtype"] = getattr(self.fw, c["dtype"])
            return "call_method", name, (a,), kwargs
        if name in ("reshape", "expand"):
            return "call_method", name, (a, tuple(c["shape"])), {}
        if name == "permute":
            return "call_method", name, (a, tuple(c["dims"])), {}
        if name == "transpose":
            return "call_method", name, (a, c["dim0"], c["dim1"]), {}
        if name in ("unsqueeze", "squeeze"):
            return "call_method", name, (a, c["dim"]), {}
        return self._spell_forward(name, c)

    def _spell_forward(self, name: str, c: dict) -> Tuple[str, Any, tuple, dict]:
        """Prims VJP rules do not emit (tests build one-prim programs with them)."""
        a = c.get("a")
        if name in ("clamp", "var", "flatten", "contiguous", "view", "squeeze", "narrow"):
            kwargs = {k: v for k, v in list(c.items())[1:]}
            if name == "view":
                return "call_method", name, (a, tuple(kwargs["shape"])), {}
            return "call_method", name, (a,), kwargs
        if name in ("layer_norm", "rms_norm", "linear", "dropout"):
            return "call_function", getattr(self.F, name), tuple(c.values()), {}
        if name == "addmm":
            return "call_function", self.fw.addmm, (c["c"], a, c["b"]), \
                {"beta": c["beta"], "alpha": c["alpha"]}
        if name == "getitem":
            return "call_function", operator.getitem, (a, c["index"]), {}
        if name == "cross_entropy_rows":  # our own prim: its signature is the eager callable
            return "call_function", prims.get(name).signature, (a, c["target"]), \
                {"ignore_index": c["ignore_index"]}
        raise NotDifferentiable(f"the emitter has no spelling for prim {name!r}")

    # -- helpers rules share -----------------------------------------------------------
    def rsub(self, scalar: float, x: Node) -> Node:
        """``scalar - x`` with the tensor first (TensorPlay's reflected scalar promotes)."""
        return self.add(self.neg(x), scalar)

    def upcast(self, x: Any) -> Any:
        """``x`` in float32 when it is 16-bit: eager's backward kernels compute there too."""
        meta = self.meta(x)
        if meta is not None and meta.dtype in ("float16", "bfloat16"):
            return self.cast(x, "float32")
        return x

    def to_dtype(self, x: Node, dtype: str) -> Node:
        return x if self.dtype(x) == dtype else self.cast(x, dtype)

    def sum_to(self, g: Node, shape: Sequence[int]) -> Node:
        """Sum ``g`` over the dims it was broadcast along to reach ``shape``."""
        shape = tuple(shape)
        have = self.shape(g)
        if have == shape:
            return g
        lead = len(have) - len(shape)
        if lead < 0:
            raise NotDifferentiable(f"gradient of shape {have} cannot reduce to {shape}")
        dims = list(range(lead)) + [i + lead for i, s in enumerate(shape)
                                    if s == 1 and have[i + lead] != 1]
        out = self.sum(g, dims, True) if dims else g
        return out if self.shape(out) == shape else self.reshape(out, shape)

    def slice_backward(self, g: Node, shape: Sequence[int], index: Any) -> Node:
        """Zeros of ``shape`` with ``g`` written at ``index`` (one opaque node: no scatter
        prim yet)."""
        node = self.graph.call_function(slice_backward, (g, tuple(shape), index))
        meta = self.meta(g)
        node.meta["tensor_meta"] = TensorMeta(tuple(shape), meta.dtype, meta.device)
        return node

    def expand_back(self, g: Node, shape: Sequence[int], dim: Any, keepdim: bool) -> Node:
        """The gradient of a reduction over ``dim`` broadcast back to the input ``shape``."""
        shape = tuple(shape)
        if not keepdim:
            kept = [1 if i in set(reduced_dims(dim, len(shape))) else s
                    for i, s in enumerate(shape)]
            g = self.reshape(g, tuple(kept))
        return g if self.shape(g) == shape else self.expand(g, shape)


def slice_backward(grad: Any, shape: Tuple[int, ...], index: Any) -> Any:
    """The gradient of ``x[index]`` for ``x`` of ``shape``: ``grad`` scattered into zeros."""
    out = grad.new_zeros(shape)
    out[index] = grad
    return out


def _dims(dim: Any) -> Any:
    return list(dim) if isinstance(dim, (list, tuple)) else dim


def reduced_dims(dim: Any, ndim: int) -> list:
    """The non-negative dims a reduction over ``dim`` removes (all for ``None`` / ``[]``).

    The forward meta rule's own reading, so a 0-d operand (dim 0 / -1 allowed, as eager
    does) has no dim to remove and a VJP never indexes its empty shape.
    """
    return list(reduction_dims(dim, ndim))
