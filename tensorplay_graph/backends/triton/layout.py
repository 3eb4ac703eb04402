"""Index spaces and operand layouts: what a kernel specialization depends on.

A pointwise kernel walks a flat index over ``sizes`` (the broadcast output
shape); a rows kernel walks ``sizes`` (the outer dims, one program per row)
times ``n`` columns. Every operand is described by its strides over that index
space (0 where it broadcasts). Adjacent dims that every operand traverses
contiguously are merged, so contiguous and simply-broadcast cases collapse to
one dimension and get the plain ``base + offs`` addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ...ir.meta import contiguous_strides

Strides = Tuple[int, ...]
#: A pointwise kernel tiles rows x columns when the last dim has at least this many elements.
MIN_TILE_COLS = 16
#: ... and at most this many: the column tiles (128 wide) are grid dim 1, at most 65535 of them.
MAX_TILE_COLS = 65535 * 128


def next_pow2(n: int) -> int:
    """The least power of two >= ``n`` (1 for n <= 1): block sizes cover a layout's extents."""
    return 1 << max(0, (int(n) - 1).bit_length())


def broadcast_strides(shape: Sequence[int], stride: Sequence[int], target: Sequence[int]) -> Strides:
    """Strides of a tensor of ``shape``/``stride`` broadcast to ``target`` (0 on broadcast dims)."""
    shape, stride, target = tuple(shape), tuple(stride), tuple(target)
    if len(shape) > len(target):
        raise ValueError(f"shape {shape} does not broadcast to {target}")
    lead = len(target) - len(shape)
    out = [0] * lead
    for size, st, tsize in zip(shape, stride, target[lead:]):
        if size == tsize:
            out.append(st if size != 1 else 0)
        elif size == 1:
            out.append(0)
        else:
            raise ValueError(f"shape {shape} does not broadcast to {target}")
    return tuple(out)


def coalesce(sizes: Sequence[int], operand_strides: Sequence[Strides]) -> Tuple[Tuple[int, ...], List[Strides]]:
    """Drop size-1 dims and merge dims every operand walks contiguously.

    >>> coalesce((4, 8), [(8, 1), (0, 1)])
    ((4, 8), [(8, 1), (0, 1)])
    >>> coalesce((4, 8), [(8, 1), (8, 1)])
    ((32,), [(1,), (1,)])
    """
    keep = [i for i, s in enumerate(sizes) if s != 1]
    new_sizes = [sizes[i] for i in keep]
    new_strides = [[st[i] for i in keep] for st in operand_strides]
    d = len(new_sizes) - 1
    while d > 0:
        mergeable = all(st[d - 1] == st[d] * new_sizes[d] for st in new_strides)
        if mergeable:
            new_sizes[d - 1] *= new_sizes[d]
            del new_sizes[d]
            for st in new_strides:
                st[d - 1] = st[d]
                del st[d]
        d -= 1
    if not new_sizes:
        return (1,), [(0,) for _ in operand_strides]
    return tuple(new_sizes), [tuple(st) for st in new_strides]


@dataclass(frozen=True)
class Layout:
    """A kernel specialization: coalesced outer ``sizes``, row length ``n`` (rows kernels),
    and per operand (inputs then outputs) outer strides and column stride."""

    sizes: Tuple[int, ...]
    strides: Tuple[Strides, ...]
    n: Optional[int] = None
    col_strides: Tuple[int, ...] = ()

    @property
    def numel(self) -> int:
        total = 1
        for s in self.sizes:
            total *= s
        return total * (self.n or 1)

    def is_linear(self, i: int) -> bool:
        """Whether operand ``i`` is addressed by the flat index (pointwise) / the row index times n."""
        if self.n is None:
            return self.strides[i] == contiguous_strides(self.sizes)
        return False

    def tiled(self) -> bool:
        """Whether a pointwise kernel walks 2-d tiles (rows x the last dim): some operand is
        not addressed by the flat index and the last dim is long enough to tile. A
        per-channel operand (batch norm's scale) is then loaded once per tile column."""
        return self.n is None and len(self.sizes) >= 2 and \
            MIN_TILE_COLS <= self.sizes[-1] <= MAX_TILE_COLS and \
            not all(self.is_linear(i) for i in range(len(self.strides)))

    def operand_kind(self, i: int) -> str:
        """How a tiled kernel addresses operand ``i``: ``linear`` (the flat index),
        ``cols`` (varies along the last dim only), ``rows`` (constant along it) or ``full``."""
        strides = self.strides[i]
        if self.is_linear(i):
            return "linear"
        if not any(strides[:-1]):
            return "cols"
        return "rows" if strides[-1] == 0 else "full"

    def signature(self) -> tuple:
        """What the generated source depends on (besides the description)."""
        if self.n is None and self.tiled():
            kinds = tuple(self.operand_kind(i) for i in range(len(self.strides)))
            return ("tiled", len(self.sizes), kinds, self.numel >= 2 ** 31)
        if self.n is None:
            linear = tuple(self.is_linear(i) for i in range(len(self.strides)))
            return ("pointwise", len(self.sizes), linear, self.numel >= 2 ** 31)
        unit_cols = tuple(c == 1 for c in self.col_strides)
        return ("rows", len(self.sizes), unit_cols, self.numel >= 2 ** 31, self.full_rows(),
                tuple(self.same_every_row(i) for i in range(len(self.strides))))

    def full_rows(self) -> bool:
        """Whether a row fills its power-of-two block exactly (a rows kernel needs no mask)."""
        return self.n is not None and self.n > 0 and self.n & (self.n - 1) == 0

    def same_every_row(self, i: int) -> bool:
        """Whether operand ``i`` is the same for every row (a norm's weight): no row offset."""
        return not any(self.strides[i])


def make_layout(sizes: Sequence[int], operand_strides: Sequence[Strides], n: Optional[int] = None,
                col_strides: Sequence[int] = ()) -> Layout:
    """Coalesce and freeze a layout."""
    csizes, cstrides = coalesce(tuple(sizes), [tuple(s) for s in operand_strides])
    return Layout(csizes, tuple(cstrides), n, tuple(col_strides))
