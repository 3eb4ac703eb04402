"""Lowering rules a prim record carries for kinds other than pointwise.

A pointwise prim's lowering is an expression template per backend. Reductions, row
patterns (kind ``norm``) and matmuls are described here, in terms a backend generates
from without knowing the prim's name. A backend generates a prim exactly when the record
lists a lowering under that backend's name (``Prim.lowerings[backend]``); what that
lowering is depends on the kind:

============  ===============================================================
reduction     a :class:`Reduction` (combine op, identity, element / final
              expressions: one masked row reduction; one object may serve several
              backends), or a row builder (below) for several passes (``var``)
norm          a row builder
matmul        a :class:`Gemm`
view, gather  an :class:`IndexMap` (which operand element each output element is)
============  ===============================================================

A *row builder* is ``fn(row, **prim_args) -> value`` over a backend's row emitter (the
Triton backend's is ``backends/triton/codegen_reduction.RowOps``: ``row.float(x)``,
``row.let(expr)``, ``row.reduce(expr, "sum")``, ``row.per_row(expr)``, ``row.n``, ...);
tensor arguments arrive as value names, the rest as Python values. Reductions and row
patterns reduce their operand ``a`` over ``Prim.reduced_dims`` (from the record's
``dims`` rule; a reduction's default is its ``dim`` argument).

>>> Reduction("prod").identity
1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

__all__ = ["Reduction", "RowBuilder", "Gemm", "IndexMap", "Source", "COMBINES"]

#: Associative combine ops a :class:`Reduction` may use, with their identity.
COMBINES = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}


@dataclass(frozen=True)
class Reduction:
    """One row reduction: ``post(combine(pre(x) for x in row))``.

    * ``combine`` -- ``"sum"``, ``"prod"``, ``"max"`` or ``"min"``.
    * ``identity`` -- what padding lanes of floating rows hold: the combine's neutral element
      by default (integer rows use their dtype's bounds for max / min). Another value is
      only right where no element is more neutral (``0.0`` for a max of non-negatives).
    * ``pre`` -- per element, over ``{x}`` (``"{x} * {x}"`` for a sum of squares).
    * ``post`` -- on the combined value ``{acc}``; ``{n}`` is the row length as a float
      literal (``mean``: ``"{acc} / {n}"``).
    * ``floating`` -- computed in floating point whatever the operand's dtype (``mean``);
      otherwise in the result's dtype (``sum`` of int32 accumulates in int64).
    * ``propagate_nan`` -- a NaN element makes the result NaN (eager's ``amax``; the
      hardware max / min skip NaN).

    ``pre`` and ``post`` are plain arithmetic (operators and parentheses), valid in every
    backend's expression language.
    """

    combine: str
    identity: Optional[float] = None
    pre: str = "{x}"
    post: str = "{acc}"
    floating: bool = False
    propagate_nan: bool = False

    def __post_init__(self) -> None:
        if self.combine not in COMBINES:
            raise ValueError(f"Reduction combine must be one of {sorted(COMBINES)}, got "
                             f"{self.combine!r}; write a row builder for anything else")
        if self.identity is None:
            object.__setattr__(self, "identity", COMBINES[self.combine])


@dataclass(frozen=True)
class RowBuilder:
    """A row builder (``fn(row, **prim_args) -> value``) whose ``per_row`` tensor arguments
    hold one value per row, shaped like the result (the reduced dims dropped):
    ``cross_entropy_rows``'s ``target``. A plain function is a builder whose other tensor
    arguments broadcast against the reduced operand (``layer_norm``'s weight)."""

    build: Callable[..., str]
    per_row: Tuple[str, ...] = ()

    def __call__(self, row: Any, **args: Any) -> str:
        return self.build(row, **args)


def _no_epilogue(acc: str, **_: Any) -> str:
    return acc


@dataclass(frozen=True)
class Gemm:
    """A matmul prim as one GEMM: ``acc = lhs @ rhs``, then ``epilogue``.

    * ``lhs`` / ``rhs`` -- the canonical arguments holding the two matrices.
    * ``rhs_transposed`` -- ``rhs`` is stored ``(N, K)`` (``linear``'s weight).
    * ``epilogue`` -- ``fn(acc, **prim_args) -> expression`` over the accumulator and the
      arguments (tensors as value names): ``linear``'s bias, ``addmm``'s
      ``beta * c + alpha * acc``.
    * ``epilogue_operands`` -- the tensor arguments the epilogue reads; each is a column
      vector ``(N,)`` or a full ``(M, N)`` tensor (backends decline other shapes).
    """

    lhs: str = "a"
    rhs: str = "b"
    rhs_transposed: bool = False
    epilogue: Callable[..., str] = _no_epilogue
    epilogue_operands: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Source:
    """Where output elements come from: operand ``operand`` (a canonical argument name, with
    ``item`` its position when the argument is a list of tensors) at ``coords`` (one index
    expression per operand dim), for the elements where ``where`` holds (``None``: all)."""

    operand: str
    coords: Tuple[str, ...]
    item: Optional[int] = None
    where: Optional[str] = None


@dataclass(frozen=True)
class IndexMap:
    """A view or gather prim as index arithmetic: every output element is one operand element.

    ``rule(coords, out_shape, **prim_args) -> [Source, ...]``: ``coords`` are the output's
    index expressions (plain arithmetic over integers, one per output dim), tensor arguments
    arrive as ``TensorMeta`` (lists of tensors as lists). Several sources need disjoint
    ``where`` conditions covering the output (``cat``: one per piece); the first source whose
    condition holds gives the element, the last one needs no condition. A backend generates
    the loads and the selection; it never sees the prim's name. ``copies(out, **prim_args)``
    says, for a view prim, when eager returns a fresh tensor rather than an alias (``reshape``
    of a permuted tensor); unset: always an alias. ``keeps_flat``: the operand's coordinates
    unravel the output's row-major flat index over the operand's shape (``reshape``,
    ``squeeze``), so a backend may read a row-major operand at that index.
    """

    rule: Callable[..., Any]
    copies: Optional[Callable[..., bool]] = None
    keeps_flat: bool = False
