"""Matmul prims (kind ``matmul``): matmul (and mm, ``@``), linear, bmm, addmm.

The ``tilelang`` lowering of each is a :class:`~tensorplay_graph.prims.lowering.Gemm`:
which arguments are the matrices, and the epilogue over the accumulator.
"""

from __future__ import annotations

from ..errors import ShapeError
from ..frameworks import adapter_for
from ..ir.meta import TensorMeta
from . import register
from .lowering import Gemm
from .record import Prim
from .rules import broadcast_shapes, require_meta


def matmul(a, b): ...
def linear(a, weight, bias=None): ...
def bmm(a, b): ...
def addmm(c, a, b, beta=1, alpha=1): ...


def _same_dtype(op: str, *metas: TensorMeta) -> str:
    dtypes = {m.dtype for m in metas if isinstance(m, TensorMeta)}
    if len(dtypes) != 1:
        raise ShapeError(f"{op}: operands must share one dtype, got {sorted(dtypes)}; cast them "
                         "to a common dtype first")
    return dtypes.pop()


def _grad(*metas) -> bool:
    return any(isinstance(m, TensorMeta) and m.requires_grad for m in metas)


def matmul_shape(a: tuple, b: tuple, op: str = "matmul") -> tuple:
    """torch.matmul's shape rule: 1-d operands get a dim prepended/appended, then removed."""
    if not a or not b:
        raise ShapeError(f"{op}: both operands need at least 1 dim, got {a} and {b}")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ShapeError(f"{op}: cannot multiply {a} by {b}: inner sizes {a2[-1]} and {b2[-2]} "
                         "differ; transpose or reshape one operand")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def matmul_meta(a, b):
    a, b = require_meta(a, "matmul", "a"), require_meta(b, "matmul", "b")
    return TensorMeta(matmul_shape(a.shape, b.shape), _same_dtype("matmul", a, b), a.device,
                      requires_grad=_grad(a, b))


def linear_meta(a, weight, bias=None):
    a, weight = require_meta(a, "linear", "a"), require_meta(weight, "linear", "weight")
    if weight.ndim not in (1, 2):
        raise ShapeError(f"linear: weight must be 1-d or 2-d (out, in), got shape {weight.shape}")
    wt = weight.shape[::-1]
    shape = matmul_shape(a.shape, wt, "linear")
    if isinstance(bias, TensorMeta):
        shape = broadcast_shapes(shape, bias.shape)
    return TensorMeta(shape, _same_dtype("linear", a, weight, bias), a.device,
                      requires_grad=_grad(a, weight, bias))


def bmm_meta(a, b):
    a, b = require_meta(a, "bmm", "a"), require_meta(b, "bmm", "b")
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise ShapeError(f"bmm: expected two 3-d tensors with equal batch, got {a.shape} and "
                         f"{b.shape}; use matmul for broadcasting")
    return TensorMeta(matmul_shape(a.shape, b.shape, "bmm"), _same_dtype("bmm", a, b), a.device,
                      requires_grad=_grad(a, b))


def addmm_meta(c, a, b, beta=1, alpha=1):
    c, a, b = (require_meta(v, "addmm", n) for v, n in ((c, "c"), (a, "a"), (b, "b")))
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"addmm: mat1 and mat2 must be 2-d, got {a.shape} and {b.shape}")
    shape = matmul_shape(a.shape, b.shape, "addmm")
    if broadcast_shapes(c.shape, shape) != shape:
        raise ShapeError(f"addmm: input of shape {c.shape} does not broadcast to {shape}")
    return TensorMeta(shape, _same_dtype("addmm", c, a, b), a.device, requires_grad=_grad(c, a, b))


def _spell(name: str, nn: bool = False, extra: tuple = ()) -> tuple:
    out = (f"tensorplay:{name}", f"torch:{name}", f"method:{name}")
    return out + ((f"tensorplay.nn.functional:{name}", f"torch.nn.functional:{name}") if nn else ()) + extra


def _record(name, *, signature, meta, spellings, reference, gemm, **kw):
    return register(Prim(name=name, kind="matmul", signature=signature, meta=meta,
                         spellings=spellings, lowerings={"reference": reference, "tilelang": gemm},
                         **kw))


def _linear_ref(a, weight, bias=None):
    out = f"np.matmul({a}, np.swapaxes({weight}, -1, -2) if np.ndim({weight}) == 2 else {weight})"
    return out if bias is None else f"({out} + {bias})"


def _addmm_ref(c, a, b, beta=1, alpha=1):
    return f"({beta!r} * {c} + {alpha!r} * np.matmul({a}, {b}))"


def _bias_epilogue(acc, bias=None, **_):
    return acc if bias is None else f"({acc} + {bias})"


def _addmm_epilogue(acc, c, beta=1, alpha=1, **_):
    return f"({alpha!r} * {acc} + {beta!r} * {c})"


_MATRIX_ALIASES = {"other": "b", "mat2": "b", "mat1": "a"}
_record("matmul", signature=matmul, meta=matmul_meta,
        spellings=_spell("matmul", extra=("tensorplay:mm", "torch:mm", "method:mm", "operator:matmul")),
        reference="np.matmul({a}, {b})", gemm=Gemm(), aliases=_MATRIX_ALIASES)
_record("linear", signature=linear, meta=linear_meta,
        spellings=("tensorplay:linear", "tensorplay.nn.functional:linear", "torch.nn.functional:linear"),
        reference=_linear_ref,
        gemm=Gemm(rhs="weight", rhs_transposed=True, epilogue=_bias_epilogue,
                  epilogue_operands=("bias",)))
_record("bmm", signature=bmm, meta=bmm_meta, spellings=_spell("bmm"), reference="np.matmul({a}, {b})",
        gemm=Gemm(), aliases=_MATRIX_ALIASES)
_record("addmm", signature=addmm, meta=addmm_meta, spellings=_spell("addmm"), reference=_addmm_ref,
        gemm=Gemm(epilogue=_addmm_epilogue, epilogue_operands=("c",)), aliases=_MATRIX_ALIASES)


def addmm_gelu(c, a, b):
    """``gelu(addmm(c, a, b), approximate="tanh")`` in one cuBLASLt call: the bias and the
    activation run in the GEMM's epilogue (``torch._addmm_activation``). Made only by the
    ``decompose`` pass, for torch CUDA half-precision GEMMs whose tanh-GELU nothing else
    reads before the activation; torch falls back to ``addmm`` + ``gelu_`` where cuBLASLt
    cannot take the call."""
    return adapter_for(a).module._addmm_activation(c, a, b, use_gelu=True)


register(Prim(name="addmm_gelu", kind="opaque", signature=addmm_gelu,
              meta=addmm_meta,
              spellings=("tensorplay_graph.prims.matmul:addmm_gelu",), traits={"fresh"},
              doc="cuBLASLt GEMM with its bias + tanh-GELU epilogue (torch._addmm_activation)"))
