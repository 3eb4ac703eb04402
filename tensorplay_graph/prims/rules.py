"""Shared helpers for prim meta rules: broadcasting, dtype promotion, reduction dims.

Promotion follows torch's ``result_type``: operands are ranked in three tiers
(tensors with dims, zero-dim tensors, Python scalars); a lower tier only wins
when its category (bool < integer < floating < complex) is higher, and a Python
scalar then contributes the default dtype of its category. TensorPlay differs in
one place (checked against its eager by the tests/conformance table): a
Python int or bool never lifts a bool tensor (``bool_tensor + 2`` is bool there,
int64 in torch). Rules for the framework of the program being compiled apply:
pass ``framework=`` or run inside :func:`framework_rules`.

>>> broadcast_shapes((4, 1), (3,))
(4, 3)
>>> result_type(TensorMeta((3,), "int32"), 1.5)
'float32'
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterable, Iterator, Optional, Sequence, Tuple

from ..errors import ShapeError
from ..frameworks import adapter_for
from ..ir.meta import FLOATING_DTYPES, INTEGER_DTYPES, TensorMeta

DEFAULT_FLOAT = "float32"
DEFAULT_INT = "int64"
DEFAULT_COMPLEX = "complex64"

_CATEGORY = {"bool": 0, **{d: 1 for d in INTEGER_DTYPES}, **{d: 2 for d in FLOATING_DTYPES},
             "complex64": 3, "complex128": 3}
_BITS = {"bool": 1, "uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64,
         "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64,
         "complex64": 64, "complex128": 128}
_SCALAR_DTYPE = {bool: "bool", int: DEFAULT_INT, float: DEFAULT_FLOAT, complex: DEFAULT_COMPLEX}


#: The framework whose promotion rules meta rules apply (set by :func:`framework_rules`).
_FRAMEWORK: contextvars.ContextVar = contextvars.ContextVar("tpg_rules_framework", default="torch")


@contextlib.contextmanager
def framework_rules(framework: Optional[str]) -> Iterator[None]:
    """Apply ``framework``'s promotion rules (``"torch"`` / ``"tensorplay"``) inside the block."""
    token = _FRAMEWORK.set(framework or "torch")
    try:
        yield
    finally:
        _FRAMEWORK.reset(token)


def current_framework() -> str:
    return _FRAMEWORK.get()


def default_float(framework: Optional[str] = None) -> str:
    """The framework's default floating dtype (``torch.set_default_dtype`` moves it)."""
    adapter = adapter_for(framework or current_framework())
    name = adapter.default_float() if adapter.loaded() else None
    return name if name in _CATEGORY and category(name) == 2 else DEFAULT_FLOAT


def is_meta(value: Any) -> bool:
    return isinstance(value, TensorMeta)


def is_scalar(value: Any) -> bool:
    """A Python number (bool, int, float, complex)."""
    return isinstance(value, (bool, int, float, complex))


def category(dtype: str) -> int:
    try:
        return _CATEGORY[dtype]
    except KeyError:
        raise ShapeError(f"unknown dtype {dtype!r}; expected one of {sorted(_CATEGORY)}") from None


def scalar_dtype(value: Any, framework: Optional[str] = None) -> str:
    """Default dtype of a Python scalar (``1.0`` -> the default float, ``"float32"``)."""
    for kind in (bool, int, float, complex):  # bool before int: True is an int too
        if isinstance(value, kind):
            return default_float(framework) if kind is float else _SCALAR_DTYPE[kind]
    raise ShapeError(f"not a Python scalar: {value!r}")


def promote_types(a: str, b: str) -> str:
    """torch.promote_types over canonical dtype strings."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        hi, lo = (a, b) if ca > cb else (b, a)
        if category(hi) == 3 and lo == "float64":
            return "complex128"
        return hi
    if ca == 2 and {a, b} == {"float16", "bfloat16"}:
        return "float32"
    if ca == 1 and "uint8" in (a, b):
        other = b if a == "uint8" else a
        return "int16" if other == "int8" else other
    return a if _BITS[a] >= _BITS[b] else b


def _promote_all(dtypes: Iterable[str]) -> Optional[str]:
    out = None
    for d in dtypes:
        out = d if out is None else promote_types(out, d)
    return out


def _combine_categories(higher: Optional[str], lower: Optional[str]) -> Optional[str]:
    """torch's combine_categories: ``lower`` only matters when its category is higher."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if category(higher) == 3:
        return higher
    if category(lower) == 3:
        return {"float64": "complex128"}.get(higher, lower if category(higher) < 2 else "complex64")
    if category(higher) == 2:
        return higher
    if higher == "bool" or category(lower) == 2:
        return promote_types(higher, lower)
    return higher


def result_type(*operands: Any, framework: Optional[str] = None) -> str:
    """Promoted dtype of TensorMeta / Python-scalar operands (other values ignored), by the
    rules of ``framework`` (default: the one set by :func:`framework_rules`, else torch)."""
    framework = framework or current_framework()
    dims = _promote_all(o.dtype for o in operands if is_meta(o) and o.ndim > 0)
    zero = _promote_all(o.dtype for o in operands if is_meta(o) and o.ndim == 0)
    scalars = [o for o in operands if is_scalar(o)]
    tensors = _combine_categories(dims, zero)
    if framework == "tensorplay" and tensors == "bool":
        scalars = [o for o in scalars if not isinstance(o, int)]  # ints/bools keep it bool
    wrapped = _promote_all(scalar_dtype(o, framework) for o in scalars)
    out = _combine_categories(tensors, wrapped)
    if out is None:
        raise ShapeError("result_type needs at least one tensor or scalar operand")
    return out


def to_floating(dtype: str, framework: Optional[str] = None) -> str:
    """The dtype of a float-valued op (``exp``) on ``dtype``: ints and bool promote to the
    framework's default float dtype."""
    return dtype if category(dtype) >= 2 else default_float(framework)


#: 16-bit floats: eager computes them in float32 (opmath) and rounds each op's result.
HALF_FLOATS = ("float16", "bfloat16")

#: The prim trait saying a framework keeps a Python-scalar ``a`` / ``b`` operand in opmath
#: (float32) for 16-bit floats (torch's mul / div: ``fp16_x * 70000`` is 35008, not
#: fp16(70000) = inf times x; its add / sub cast the scalar, measured).
_OPMATH_SCALAR_TRAIT = {"torch": "torch_opmath_scalar", "tensorplay": "tensorplay_opmath_scalar"}


def scalar_kept_in_opmath(prim: Any, operand: str, common: str, framework: str) -> bool:
    """True when ``framework``'s eager keeps a Python-scalar ``operand`` of pointwise ``prim``
    in float32 rather than casting it to ``common``, the 16-bit dtype the op computes on
    (``fp16_x + 70000`` adds fp16(70000) = inf: cast; ``fp16_x * 70000`` in torch: kept).
    Either side counts: ``70000 / x`` keeps 70000 in float32 too."""
    return (common in HALF_FLOATS and operand in ("a", "b")
            and _OPMATH_SCALAR_TRAIT.get(framework, "") in prim.traits)


def broadcast_shapes(*shapes: Sequence[int]) -> Tuple[int, ...]:
    """NumPy/torch broadcasting; raises ``ShapeError`` naming both shapes."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, size in enumerate(shape, start=ndim - len(shape)):
            if size == out[i] or size == 1:
                continue
            if out[i] != 1:
                raise ShapeError(
                    f"shapes {[tuple(s) for s in shapes]} cannot broadcast: size {size} vs "
                    f"{out[i]} at dim {i - ndim}; make those sizes equal or 1")
            out[i] = size
    return tuple(out)


def tensor_operands(*values: Any) -> list:
    return [v for v in values if is_meta(v)]


def device_of(*values: Any) -> str:
    """Device of the first tensor operand (``"cpu"`` when all are scalars)."""
    for v in values:
        if is_meta(v):
            return v.device
    return "cpu"


def wrap_dim(dim: int, ndim: int, op: str = "op") -> int:
    """A non-negative dim index; a 0-d tensor accepts dims -1 and 0, like torch."""
    bound = max(ndim, 1)
    if not -bound <= dim < bound:
        raise ShapeError(f"{op}: dim {dim} out of range for a {ndim}-d tensor "
                         f"(expected [{-bound}, {bound - 1}])")
    return dim % bound


def reduction_dims(dim: Any, ndim: int, op: str = "reduction") -> Tuple[int, ...]:
    """Sorted non-negative dims to reduce; ``None`` or an empty list means all dims."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    wrapped = sorted({wrap_dim(int(d), ndim, op) for d in dims})
    if len(wrapped) != len(dims):
        raise ShapeError(f"{op}: dim {dim} names a dimension twice")
    return tuple(d for d in wrapped if d < ndim)


def reduced_shape(shape: Sequence[int], dims: Tuple[int, ...], keepdim: bool) -> Tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def reduce_meta(a: TensorMeta, dim: Any, keepdim: bool, dtype: str, op: str) -> TensorMeta:
    """TensorMeta of reducing ``a`` over ``dim`` (contiguous result)."""
    dims = reduction_dims(dim, a.ndim, op)
    return TensorMeta(reduced_shape(a.shape, dims, bool(keepdim)), dtype, a.device)


def require_meta(value: Any, op: str, arg: str) -> TensorMeta:
    if not is_meta(value):
        raise ShapeError(f"{op}: argument {arg!r} must be a tensor, got {type(value).__name__} "
                         f"{value!r}")
    return value


def require_floating(dtype: str, op: str) -> None:
    if category(dtype) < 2:
        raise ShapeError(f"{op}: expected a floating-point input, got {dtype}; cast it first "
                         "(x.float())")


_INT_RANGE = {"int8": (-2 ** 7, 2 ** 7 - 1), "int16": (-2 ** 15, 2 ** 15 - 1),
              "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1),
              "uint8": (0, 2 ** 8 - 1)}


def scalar_out_of_range(node: Any) -> Optional[str]:
    """A reason when a Python int operand of a pointwise node does not fit its integer dtype.

    Eager wraps such constants (``int8_tensor * 300``); a generated kernel cannot even
    hold them, so backends decline the node and eager dispatch runs it.
    """
    args = node.meta.get("prim_args", {})
    operands = [v.meta.get("tensor_meta") if hasattr(v, "meta") else v for v in args.values()]
    operands = [o for o in operands if is_meta(o) or is_scalar(o)]
    ints = [o for o in operands if isinstance(o, int) and not isinstance(o, bool)]
    if not ints or not any(is_meta(o) for o in operands):
        return None
    try:
        common = result_type(*operands)
    except ShapeError:
        return None
    low, high = _INT_RANGE.get(common, (None, None))
    for value in ints:
        if low is not None and not low <= value <= high:
            return f"integer constant {value} does not fit in {common}"
    return None
