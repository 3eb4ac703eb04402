"""The small kernel description that the Triton code generators consume.

A region is translated (``lowering.py``) into one or more ``KernelDesc``; the
generators render each to ``@triton.jit`` source. Keeping this layer free of
the graph IR lets the generators be tested from hand-written descriptions.

Values inside a kernel are *compute values*: floating data is loaded and
computed in fp32 (fp64 stays fp64), integers and bools keep their dtype, and
each output is cast to its storage dtype at the store.
"""

from __future__ import annotations

import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

from ...errors import LoweringError
from ...ir.meta import IOTA

TL_DTYPES = {
    "float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32",
    "float64": "tl.float64", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
    "int64": "tl.int64", "uint8": "tl.uint8", "bool": "tl.int1",
}
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1,
            "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "bool": 1}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Row reductions a statement may perform, with the neutral element masked lanes take.
REDUCTIONS = {"sum": "0.0", "prod": "1.0", "max": "float('-inf')", "min": "float('inf')"}


def compute_dtype(dtype: str) -> str:
    """The dtype a value of storage dtype ``dtype`` is computed in."""
    if dtype in ("float16", "bfloat16", "float32"):
        return "float32"
    return dtype


def check_ident(name: str, what: str = "identifier") -> str:
    """Validate that ``name`` can be pasted into generated source as an identifier."""
    if not isinstance(name, str) or not _IDENT.match(name) or keyword.iskeyword(name):
        raise LoweringError(f"triton backend: {what} {name!r} is not a valid identifier; "
                            "node names must be sanitized before code generation")
    return name


#: -0.0 spelled from its bits: Triton 3.6 turns a -0.0 constant (a literal, or constexpr
#: arithmetic such as ``0.0 * -1.0``) into +0.0 when it compiles for a GPU, so ``x / -0.0``
#: came out with the wrong sign of infinity (measured on the H200:
#: benchmarks/triton_special_values_gpu.py). A 0-d tensor: it broadcasts and promotes as an
#: fp32 scalar does.
NEG_ZERO = "tl.full((), -2147483648, tl.int32).to(tl.float32, bitcast=True)"


def spelled_otherwise(value: Any) -> bool:
    """A float whose own ``repr`` does not compile to its value in a kernel: inf, nan, -0.0."""
    return isinstance(value, float) and (not math.isfinite(value) or
                                         (value == 0.0 and math.copysign(1.0, value) < 0))


def literal(value) -> str:
    """Source text of a Python scalar constant (bool, int or float; inf/nan handled)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if not spelled_otherwise(value):
            return repr(value)
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return NEG_ZERO
    raise LoweringError(f"triton backend: constant {value!r} of type {type(value).__name__} "
                        "cannot be embedded in a kernel (only bool/int/float)")


@dataclass(frozen=True)
class TensorArg:
    """A tensor the kernel loads; ``name`` becomes ``{name}_ptr`` in the source."""

    name: str
    dtype: str
    #: in a rows kernel: constant along the row, loaded once per row (a scalar, not a block)
    per_row: bool = False
    #: an arange constant (element k holds k, :func:`is_iota`): its value is the offset the
    #: kernel computes for it, never read from memory
    iota: bool = False


def is_iota(node: object) -> bool:
    """Whether ``node``'s value holds k at element offset k from its data pointer."""
    return bool(getattr(node, "meta", {}).get(IOTA))


@dataclass(frozen=True)
class Stmt:
    """``var = expr``; with ``reduce`` set, ``var`` is the row reduction of ``expr``.

    ``expr`` is Triton source over input names and earlier ``var``s. ``dtype``
    is the compute dtype of the value; ``source`` the graph node it implements;
    ``identity`` what padding lanes of a floating reduction hold (default: the
    combine's neutral element, ``REDUCTIONS``).
    """

    var: str
    expr: str
    dtype: str
    reduce: Optional[str] = None
    source: str = ""
    identity: Optional[str] = None


@dataclass(frozen=True)
class OutputArg:
    """A stored value: ``{name}_ptr`` receives ``var`` cast to ``dtype``.

    In a rows kernel ``per_row`` outputs hold one value per row (a reduction).
    """

    name: str
    var: str
    dtype: str
    per_row: bool = False


@dataclass
class KernelDesc:
    """One kernel: ``kind`` is ``"pointwise"`` (flat index space) or ``"rows"``.

    ``rows`` kernels run one program per row of ``n`` elements; statements with
    ``reduce`` produce one value per row, which later statements broadcast.
    """

    name: str
    kind: str
    inputs: List[TensorArg]
    stmts: List[Stmt]
    outputs: List[OutputArg]
    sources: List[str] = field(default_factory=list)

    def validate(self) -> "KernelDesc":
        check_ident(self.name, "kernel name")
        if self.kind not in ("pointwise", "rows"):
            raise LoweringError(f"triton backend: kernel kind {self.kind!r} unknown")
        for arg in list(self.inputs) + list(self.outputs):
            check_ident(arg.name, "argument name")
            if arg.dtype not in TL_DTYPES:
                raise LoweringError(f"triton backend: dtype {arg.dtype} of {arg.name!r} "
                                    f"is not supported (supported: {sorted(TL_DTYPES)})")
        for stmt in self.stmts:
            check_ident(stmt.var, "value name")
            if stmt.reduce is not None and (self.kind != "rows" or stmt.reduce not in REDUCTIONS):
                raise LoweringError(f"triton backend: reduction {stmt.reduce!r} of "
                                    f"{stmt.source or stmt.var} needs a rows kernel")
        return self

    def bytes_per_element(self) -> Tuple[int, int]:
        """(bytes read, bytes written) per element of the index space, ignoring broadcast."""
        read = sum(ITEMSIZE[a.dtype] for a in self.inputs)
        written = sum(ITEMSIZE[o.dtype] for o in self.outputs if not o.per_row)
        return read, written
