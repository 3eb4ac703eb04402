"""Launch configuration of column-reduction kernels (``codegen_columns``).

The tile is ``BLOCK_R x BLOCK_K`` (reduced x kept); ``BLOCK_K`` spans up to 128 kept
indices (256 B of bf16 per tile row: whole cache lines), ``BLOCK_R`` fills the tile to
4096 elements. Few column blocks over a tall row (``x.sum(0)`` of 32768 x 4096: 16 blocks)
would leave most SMs idle, so the reduced index is split until about
``TARGET_PROGRAMS`` programs run, each over at least ``MIN_TILES`` tiles; a split
launches a second, small kernel that combines the partial results in order. A kernel with
several passes over the row (softmax over dim 0) cannot split: it narrows ``BLOCK_K`` to
16 kept indices (one 32-byte sector of bf16) until about ``MIN_PROGRAMS`` programs run.
Contiguous rows too long for a rows kernel take 1-4 rows per tile, long along the row.

``TPG_TRITON_COLUMN_CONFIG="BLOCK_R,BLOCK_K,WARPS[,SPLIT]"`` overrides the choice
(benchmarks sweep it).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

from ...errors import LoweringError
from ...frameworks import adapter_for
from .codegen_pointwise import KernelSource
from .kernel_desc import KernelDesc
from .launcher import SpecializedLaunch
from .layout import Layout

#: Programs a split aims for: about four per SM on a 132-SM H200 (the H200 sweep of
#: 2026-12-01 19:10 UTC: 512 programs of 32 x 128 tiles, 4 warps, read 32768 x 4096 bf16 at
#: 3.4 TB/s; 1024 programs of 32 x 256 tiles, 8 warps, at 2.8 TB/s).
TARGET_PROGRAMS = 512
#: Tiles each split loops over at least (amortizes its partial-result store).
MIN_TILES = 4
#: Column blocks a multi-pass kernel (which cannot split) aims for, narrowing BLOCK_K.
MIN_PROGRAMS = 256
TILE = 4096


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ColumnConfig:
    block_r: int
    block_k: int
    warps: int
    split: int          # programs along the reduced index per column block (1: one stage)
    split_rows: int     # reduced indices per split (a multiple of block_r)


def _override(n: int) -> Tuple[int, ...]:
    text = os.environ.get("TPG_TRITON_COLUMN_CONFIG", "")
    if not text:
        return ()
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) not in (3, 4) or any(v <= 0 for v in values) or \
            any(v & (v - 1) for v in values[:2]):
        raise LoweringError(f"TPG_TRITON_COLUMN_CONFIG={text!r}: expected "
                            "'BLOCK_R,BLOCK_K,WARPS[,SPLIT]' with powers of two for the blocks")
    return values


def column_config(num_k: int, n: int, contiguous: bool = False, single_pass: bool = True
                  ) -> ColumnConfig:
    """Blocks, warps and split for ``num_k`` rows (kept indices) of ``n`` elements.

    ``contiguous``: the rows themselves are contiguous (rows too long for a rows kernel): few
    rows per tile, long along the row. Only a ``single_pass`` kernel splits its rows."""
    forced = _override(n)
    if forced:
        block_r, block_k, warps = forced[:3]
    else:
        block_k = min(4 if contiguous else 128, max(1 if contiguous else 16, _next_pow2(num_k)))
        if not (single_pass or contiguous):  # no split: narrower blocks give more programs
            block_k = min(block_k, max(16, _next_pow2(_cdiv(num_k, MIN_PROGRAMS))))
        block_r = max(1, min(_next_pow2(n), TILE // block_k))
        warps = 4
    tiles = _cdiv(n, block_r)
    if not single_pass:
        split = 1
    elif len(forced) == 4:
        split = forced[3]
    else:
        split = min(tiles // MIN_TILES, _cdiv(TARGET_PROGRAMS, _cdiv(num_k, block_k)))
    split = max(1, min(split, tiles))
    split_rows = _cdiv(tiles, split) * block_r
    return ColumnConfig(block_r, block_k, warps, _cdiv(n, split_rows), split_rows)


def config_for(desc: KernelDesc, layout: Layout) -> ColumnConfig:
    """The configuration of a column kernel of ``desc`` over ``layout`` (see ``columns_fit``)."""
    from .codegen_columns import passes_of
    first = next(i for i, a in enumerate(desc.inputs) if not a.per_row)
    return column_config(layout.numel // layout.n, layout.n, layout.col_strides[first] == 1,
                         passes_of(desc).loops == 1)


def _filled(source: KernelSource, values: dict) -> KernelSource:
    params = tuple(("const", p[1], values[p[1]]) if p[0] == "const" else p for p in source.params)
    return dataclasses.replace(source, params=params, next=None)


class TwoStageLaunch:
    """Stage 1 writes partial results to fresh workspaces; stage 2 combines them."""

    __slots__ = ("first", "second", "workspaces")

    def __init__(self, first: SpecializedLaunch, second: SpecializedLaunch,
                 workspaces: List[Tuple[int, Any]]) -> None:
        self.first, self.second, self.workspaces = first, second, workspaces

    def launch(self, operands: Sequence[Any]) -> None:
        empty = adapter_for("torch").module.empty
        device = operands[0].device
        operands = tuple(operands) + tuple(empty((size,), dtype=dtype, device=device)
                                           for size, dtype in self.workspaces)
        self.first.launch(operands)
        self.second.launch(operands)


def column_launch(jit: Any, desc: KernelDesc, source: KernelSource, layout: Layout) -> Any:
    """The launch (one stage or two) of a rendered column kernel for ``layout``.

    ``jit(source) -> @triton.jit function``."""
    num_k = layout.numel // layout.n
    cfg = config_for(desc, layout)
    values = {"num_k": num_k, "split_rows": cfg.split_rows, "n_split": cfg.split}
    blocks = {"BLOCK_R": cfg.block_r, "BLOCK_K": cfg.block_k}
    grid_k = _cdiv(num_k, cfg.block_k)
    stage1 = _filled(source, values)
    first = SpecializedLaunch(jit(stage1), stage1, layout, (grid_k, cfg.split), blocks, cfg.warps)
    if source.next is None:
        return first
    stage2 = _filled(source.next, values)
    second = SpecializedLaunch(jit(stage2), stage2, layout, (grid_k,),
                               {"BLOCK_R": 1, "BLOCK_K": cfg.block_k}, 4)
    torch = adapter_for("torch")
    workspaces = [(cfg.split * num_k, torch.dtype(s.dtype)) for s in desc.stmts
                  if s.reduce is not None]
    return TwoStageLaunch(first, second, workspaces)
