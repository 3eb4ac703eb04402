"""Launch configuration of column-reduction kernels (``codegen_columns``).

The tile is ``BLOCK_R x BLOCK_K`` (reduced x kept); ``BLOCK_K`` spans up to 128 kept
indices (256 B of bf16 per tile row: whole cache lines), ``BLOCK_R`` fills the tile to
``TILE`` elements (``TILE_MULTI_PASS`` in a kernel that loops over the row more than once).
The loop over the row is software-pipelined ``STAGES`` deep (loads in flight through shared
memory, ``PIPELINE_BYTES`` at most per program). Few column blocks over a tall row
(``x.sum(0)`` of 32768 x 4096: 32 blocks) would leave most SMs idle, so the reduced index is
split until about ``TARGET_PROGRAMS`` programs run, each over at least ``MIN_TILES`` tiles;
the last program of each column block combines the partial results in a fixed order
(``codegen_columns``). A kernel with several passes over the row (softmax over dim 0)
cannot split: it narrows ``BLOCK_K`` to 16 kept indices (one 32-byte sector of bf16) until
about ``MIN_PROGRAMS`` programs run.
Contiguous rows too long for a rows kernel take 1-4 rows per tile, long along the row.

``TPG_TRITON_COLUMN_CONFIG="BLOCK_R,BLOCK_K,WARPS[,SPLIT]"`` overrides the choice
(benchmarks sweep it).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from ...errors import LoweringError
from ...frameworks import adapter_for
from .codegen_pointwise import KernelSource
from .kernel_desc import ITEMSIZE, KernelDesc
from .launcher import SpecializedLaunch
from .layout import Layout, next_pow2

#: Programs a split aims for: about two per SM on a 132-SM H200. With the loop pipelined
#: 3 deep, 64 x 128 tiles over 256 programs read 32768 x 4096 bf16 at the copy bandwidth
#: (benchmarks/column_sum_gpu.py, 2026-12-02 19:25 UTC: 100.7% of copy bandwidth back to
#: back; unpipelined, 512 programs of 32 x 128 were best, at 95%).
TARGET_PROGRAMS = 256
#: Tiles each split loops over at least (amortizes its partial-result store).
MIN_TILES = 4
#: Column blocks a multi-pass kernel (which cannot split) aims for, narrowing BLOCK_K.
MIN_PROGRAMS = 256
TILE = 8192
TILE_MULTI_PASS = 4096
#: Shared memory the pipelined loads of one program may hold (Hopper: 228 KB per SM).
PIPELINE_BYTES = 64 * 1024
MAX_STAGES = 3


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ColumnConfig:
    block_r: int
    block_k: int
    warps: int
    split: int          # programs along the reduced index per column block (1: no split)
    split_rows: int     # reduced indices per split (a multiple of block_r)
    stages: int = 1     # software-pipelining depth of the loop over the row


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


def column_config(num_k: int, n: int, contiguous: bool = False, single_pass: bool = True,
                  row_bytes: int = 2) -> ColumnConfig:
    """Blocks, warps and split for ``num_k`` rows (kept indices) of ``n`` elements.

    ``contiguous``: the rows themselves are contiguous (rows too long for a rows kernel): few
    rows per tile, long along the row. Only a ``single_pass`` kernel splits its rows; its
    tile holds ``TILE`` elements of one bf16 input, fewer of wider or several inputs
    (``row_bytes`` per tile element), so that its loads still pipeline ``MAX_STAGES`` deep:
    two float32 inputs in 64 x 128 tiles filled the 64 KB alone, unpipelined."""
    forced = _override(n)
    if forced:
        block_r, block_k, warps = forced[:3]
    else:
        block_k = min(4 if contiguous else 128, max(1 if contiguous else 16, next_pow2(num_k)))
        if not (single_pass or contiguous):  # no split: narrower blocks give more programs
            block_k = min(block_k, max(16, next_pow2(_cdiv(num_k, MIN_PROGRAMS))))
        tile = TILE if single_pass or contiguous else TILE_MULTI_PASS
        if single_pass and not contiguous:
            tile = max(block_k, tile * 2 // next_pow2(max(2, row_bytes)))
        block_r = max(1, min(next_pow2(n), tile // block_k))
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


def pipeline_stages(cfg: ColumnConfig, row_bytes: int, loops: int = 1) -> int:
    """How deep the loops' loads are pipelined: ``MAX_STAGES`` tiles of every full-row input
    (``row_bytes`` per tile element) in flight, in each of ``loops`` passes over the row,
    where ``PIPELINE_BYTES`` holds them."""
    per_stage = cfg.block_r * cfg.block_k * row_bytes * loops
    return max(1, min(MAX_STAGES, PIPELINE_BYTES // max(1, per_stage)))


def config_for(desc: KernelDesc, layout: Layout) -> ColumnConfig:
    """The configuration of a column kernel of ``desc`` over ``layout`` (see ``columns_fit``)."""
    from .codegen_columns import passes_of
    first = next(i for i, a in enumerate(desc.inputs) if not a.per_row)
    loops = passes_of(desc).loops
    row_bytes = sum(ITEMSIZE.get(a.dtype, 8) for a in desc.inputs if not a.per_row)
    cfg = column_config(layout.numel // layout.n, layout.n, layout.col_strides[first] == 1,
                        loops == 1, row_bytes)
    return dataclasses.replace(cfg, stages=pipeline_stages(cfg, row_bytes, loops))


def _filled(source: KernelSource, values: dict) -> KernelSource:
    params = tuple(("const", p[1], values[p[1]]) if p[0] == "const" else p for p in source.params)
    return dataclasses.replace(source, params=params)


def _stream_key(torch: Any, device: Any) -> Any:
    """Which stream a launch on ``device`` runs on: ticket counters are per stream, so
    launches on two streams never share one. (The interpreter runs programs in turn.)"""
    if device.type != "cuda":
        return None
    return device.index, torch._C._cuda_getCurrentRawStream(device.index)


class SplitLaunch:
    """A split column kernel: a fresh partial-result workspace per reduction and call, and a
    ticket counter per column block, per device and stream, zeroed once (the kernel's last
    program of each block resets its counter)."""

    __slots__ = ("kernel", "workspaces", "blocks", "_tickets", "_torch")

    def __init__(self, kernel: SpecializedLaunch, workspaces: List[Tuple[int, Any]],
                 blocks: int) -> None:
        self.kernel, self.workspaces, self.blocks = kernel, workspaces, blocks
        self._tickets: Dict[Any, Any] = {}
        self._torch = adapter_for("torch").module  # bound once: launch is on the hot path

    def launch(self, operands: Sequence[Any]) -> None:
        torch = self._torch
        device = operands[0].device
        key = _stream_key(torch, device)
        tickets = self._tickets.get(key)
        if tickets is None:
            tickets = self._tickets[key] = torch.zeros((self.blocks,), dtype=torch.int32,
                                                       device=device)
        self.kernel.launch(tuple(operands) + tuple(
            torch.empty((size,), dtype=dtype, device=device) for size, dtype in self.workspaces)
            + (tickets,))


def column_launch(jit: Any, desc: KernelDesc, source: KernelSource, layout: Layout) -> Any:
    """The launch of a rendered column kernel for ``layout``. ``jit(source) -> @triton.jit
    function``."""
    num_k = layout.numel // layout.n
    cfg = config_for(desc, layout)
    values = {"num_k": num_k, "split_rows": cfg.split_rows, "n_split": cfg.split}
    blocks = {"BLOCK_R": cfg.block_r, "BLOCK_K": cfg.block_k, "STAGES": cfg.stages}
    grid_k = _cdiv(num_k, cfg.block_k)
    filled = _filled(source, values)
    kernel = SpecializedLaunch(jit(filled), filled, layout, (grid_k, cfg.split), blocks,
                               cfg.warps)
    if not any(p[0] == "const" and p[1] == "n_split" for p in source.params):
        return kernel
    torch = adapter_for("torch")
    workspaces = [(cfg.split * num_k, torch.dtype(s.dtype)) for s in desc.stmts
                  if s.reduce is not None]
    return SplitLaunch(kernel, workspaces, grid_k)
