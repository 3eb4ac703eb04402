"""Render a rows ``KernelDesc`` as looped tiles: rows strided in memory, or too long.

``x.sum(0)`` of an ``(R, C)`` tensor reduces ``C`` rows of ``R`` elements lying ``C`` apart.
One program per row (``codegen_rows``) reads one element per cache line. Here a program
takes ``BLOCK_K`` consecutive rows (kept indices: contiguous in memory) and loops over the
reduced index in ``BLOCK_R x BLOCK_K`` tiles, so every load is coalesced along the kept
dim; each reduction accumulates elementwise in a 2-D register tile (fp32 for floats), which
is reduced once after the loop. Middle dims (``sum(1)`` of ``(B, R, C)``) are the same
kernel: the kept dims ``(B, C)`` are one flat index split into coordinates. Contiguous rows
longer than a rows kernel holds in registers loop the same way, with narrow ``BLOCK_K``.

A reduced value read back on the row (softmax, ``var``, ``x - x.mean(0)``) takes one more
loop over the row per level (:func:`passes_of`). A single-pass kernel may split the reduced
index over ``n_split`` programs per column block, in one launch: each writes its split's
partial results to a workspace and takes a ticket from its column block's counter; the
program holding the last ticket combines the partials in a fixed order (deterministic: the
same whichever program finishes last), runs the per-row epilogue (``x.sum(0) * 2 + b``)
and resets the counter for the next launch. A barrier before the ticket and release /
acquire order on it make every program's partials visible to the last one, as Inductor's
cooperative reductions do (``x_grid_barrier``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional

from .codegen_common import (INDENT, _neutral, combine_function_lines, header, operand_expr,
                             signature_lines, store_line)
from .codegen_pointwise import KernelSource, _coords, _param_text, operand_names
from .kernel_desc import TL_DTYPES, KernelDesc
from .layout import Layout

# a name, not an attribute: a value named ``where`` must not match ``tl.where`` (seed 6001587:
# the amin epilogue, read as an over-the-row value, was never emitted: NameError)
_NAME = re.compile(r"(?<![.\w])[A-Za-z_][A-Za-z0-9_]*\b")
#: value classes: over the row (``elem``), one per row (``row``), constant along the row
ELEM, ROW, CONST = "elem", "row", "const"
#: launch-time constants: the tile, and how deep the loop over the row is pipelined
CONSTEXPRS = ("BLOCK_R", "BLOCK_K", "STAGES")
_COMBINE = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "tl.maximum({a}, {b})",
            "min": "tl.minimum({a}, {b})"}


@dataclass(frozen=True)
class Passes:
    """Which loop over the row computes each value.

    ``kind[v]``: ``elem`` / ``row`` / ``const``. ``level[v]``: an ``elem`` value is computed in
    loops ``level`` and later (it reads per-row results of earlier loops); a ``row`` value is
    known after loop ``level - 1``; a reduction accumulates in the loop of its operand's level.
    ``loops``: how many passes over the row (softmax: 3; a plain sum: 1).
    """

    kind: Dict[str, str]
    level: Dict[str, int]
    loops: int


def passes_of(desc: KernelDesc) -> Optional[Passes]:
    """The passes ``desc`` needs over each row; None when a reduction is over bools."""
    kind: Dict[str, str] = {a.name: CONST if a.per_row else ELEM for a in desc.inputs}
    level: Dict[str, int] = {a.name: 0 for a in desc.inputs}
    loops = 1
    for stmt in desc.stmts:
        names = [n for n in _NAME.findall(stmt.expr) if n in kind]
        kinds = {kind[n] for n in names}
        if "cols" in _NAME.findall(stmt.expr):  # the index along the row
            kinds.add(ELEM)
        at = max((level[n] for n in names), default=0)
        if stmt.reduce is not None:
            if stmt.dtype == "bool":
                return None
            kind[stmt.var], level[stmt.var] = ROW, at + 1
            loops = max(loops, at + 1)
        else:
            kind[stmt.var] = ELEM if ELEM in kinds else ROW if ROW in kinds else CONST
            level[stmt.var] = at
    for out in desc.outputs:
        if not out.per_row:
            loops = max(loops, level[out.var] + 1)
    return Passes(kind, level, loops)


def columns_fit(desc: KernelDesc, layout: Layout, max_row: int) -> bool:
    """Whether a column kernel serves ``layout``: the first full-row input's rows are strided
    with a contiguous innermost kept dim (loads coalesce along the kept dims), or its rows
    are contiguous but longer than the ``max_row`` a rows kernel keeps in registers."""
    first = next((i for i, a in enumerate(desc.inputs) if not a.per_row), None)
    if first is None or layout.n is None or passes_of(desc) is None:
        return False
    col = layout.col_strides[first]
    if col == 1:
        return layout.n > max_row
    return col != 0 and layout.strides[first][-1] == 1


def _tile(acc: str) -> str:
    return f"tl.full([BLOCK_R, BLOCK_K], {acc}, {{dtype}})"


def render_columns(desc: KernelDesc, layout: Layout, split: bool) -> KernelSource:
    """The column kernel for ``layout``; ``split`` (the reduced index over several programs,
    combined by the last) needs a single pass over the row."""
    desc.validate()
    passes = passes_of(desc)
    assert passes is not None and (passes.loops == 1 or not split), "see passes_of"
    return _render(desc, layout, passes, split)


def _params(desc: KernelDesc, layout: Layout, split: bool) -> List[tuple]:
    """Operands, then with ``split`` one partial-result workspace per reduction and the
    ticket counters (``columns.SplitLaunch`` passes them), then the scalars."""
    names = operand_names(desc)
    reduces = [s for s in desc.stmts if s.reduce is not None]
    ndim = len(layout.sizes)
    full = [not a.per_row for a in desc.inputs] + [not o.per_row for o in desc.outputs]
    params: List[tuple] = [("ptr", i) for i in range(len(names))]
    if split:
        params += [("ptr", len(names) + j) for j in range(len(reduces) + 1)]
    params += [("n",), ("const", "num_k", None)]
    params += [("const", "split_rows", None), ("const", "n_split", None)] if split else []
    params += [("size", d) for d in range(1, ndim)]
    for i in range(len(names)):
        params += [("stride", i, d) for d in range(ndim) if not unit_last(layout, i, d)]
        if full[i] and layout.col_strides[i] != 1:
            params.append(("col_stride", i))
    return params


def _text(param: tuple, desc: KernelDesc) -> str:
    names = operand_names(desc)
    reduces = [s.var for s in desc.stmts if s.reduce is not None]
    kind = param[0]
    if kind == "ptr" and param[1] >= len(names):  # a split's workspaces, then its tickets
        j = param[1] - len(names)
        return f"{reduces[j]}_part_ptr" if j < len(reduces) else "tickets_ptr"
    if kind == "const":
        return param[1]
    return _param_text(param, names)  # pointers, "n", sizes and strides as pointwise spells them


def unit_last(layout: Layout, i: int, d: int) -> bool:
    """Whether dim ``d`` is operand ``i``'s innermost kept dim with stride 1: written as a
    plain index so Triton sees contiguous lanes and vectorizes the loads."""
    return d == len(layout.sizes) - 1 and layout.strides[i][d] == 1


def column_signature(layout: Layout) -> tuple:
    """What a column kernel's source depends on besides ``Layout.signature()``."""
    last = len(layout.sizes) - 1
    return tuple(unit_last(layout, i, last) for i in range(len(layout.strides)))


def _offset(name: str, i: int, layout: Layout) -> str:
    ndim = len(layout.sizes)
    return " + ".join(f"r{d}" if unit_last(layout, i, d) else f"r{d} * {name}_stride{d}"
                      for d in range(ndim))


def _col_offset(name: str, i: int, layout: Layout) -> str:
    return "cols" if layout.col_strides[i] == 1 else f"cols * {name}_col_stride"


def _render(desc: KernelDesc, layout: Layout, passes: Passes, split: bool) -> KernelSource:
    names = operand_names(desc)
    ndim = len(layout.sizes)
    wide = layout.numel >= 2 ** 31
    params = _params(desc, layout, split)
    what = ("n_split programs per BLOCK_K rows; the last one combines their partial results"
            if split else f"one program per BLOCK_K rows, {passes.loops} loop(s) over the row")
    rows = " x ".join(str(s) for s in layout.sizes)
    lines = header(desc, f"{rows} rows of {layout.n} elements, looped over; {what}")
    lines += combine_function_lines(desc.stmts)
    lines += signature_lines(desc.name, [_text(p, desc) for p in params], list(CONSTEXPRS))
    pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    lines += [f"{INDENT}ks = {pid} * BLOCK_K + tl.arange(0, BLOCK_K)[None, :]",
              f"{INDENT}kmask = ks < num_k"]
    lines += _coords(ndim, "ks", "r")
    offsets = [_offset(n, i, layout) for i, n in enumerate(names)]
    for i, arg in enumerate(desc.inputs):
        if arg.per_row:
            lines.append(f"{INDENT}{arg.name} = {operand_expr(arg, offsets[i], 'kmask')}")
    lines += [f"{INDENT}{s.var} = {s.expr}" for s in desc.stmts
              if s.reduce is None and passes.kind[s.var] == CONST]
    reduces = [s for s in desc.stmts if s.reduce is not None]
    for loop in range(passes.loops):
        lines += _loop(desc, layout, passes, loop, offsets, split, wide)
        for s in reduces:
            if passes.level[s.var] == loop + 1:
                lines.append(f"{INDENT}{s.var} = {_final(s)}")
        if not split:
            lines += _row_lines(desc, passes, loop + 1)
    base = len(desc.inputs)
    epilogue = [store_line(out.name, out.var, out.dtype, offsets[base + j], "kmask")
                for j, out in enumerate(desc.outputs) if out.per_row]
    if split:
        lines += _last_program(reduces, _row_lines(desc, passes, 1) + epilogue)
    else:
        lines += epilogue
    return KernelSource(desc.name, "\n".join(lines) + "\n", tuple(params), CONSTEXPRS)


def _row_lines(desc: KernelDesc, passes: Passes, level: int) -> List[str]:
    """Per-row statements known once the reductions of loop ``level - 1`` are done."""
    return [f"{INDENT}{s.var} = {s.expr}" for s in desc.stmts
            if s.reduce is None and passes.kind[s.var] == ROW and passes.level[s.var] == level]


def _neutral_of(stmt) -> str:
    if stmt.identity is not None and stmt.dtype.startswith("float"):
        return stmt.identity
    return _neutral(stmt.reduce, stmt.dtype)


def _loop(desc: KernelDesc, layout: Layout, passes: Passes, loop: int, offsets: List[str],
          split: bool, wide: bool) -> List[str]:
    """Pass ``loop`` over the row: loads, the elementwise work known by then, the reductions
    of this pass, the full-row outputs of this pass."""
    body = INDENT * 2
    lines = []
    reduces = [s for s in desc.stmts if s.reduce is not None and passes.level[s.var] == loop + 1]
    for s in reduces:
        init = _tile(_neutral_of(s)).format(dtype=TL_DTYPES[s.dtype])
        lines.append(f"{INDENT}{s.var}_acc = {init}")
    if split:
        lines += [f"{INDENT}row_start = tl.program_id(1) * split_rows",
                  f"{INDENT}row_end = tl.minimum(row_start + split_rows, n_cols)"]
    elif loop == 0:
        lines += [f"{INDENT}row_start = 0", f"{INDENT}row_end = n_cols"]
    rr = "tl.arange(0, BLOCK_R)[:, None]" + (".to(tl.int64)" if wide else "")
    lines += [f"{INDENT}for start in tl.range(row_start, row_end, BLOCK_R, num_stages=STAGES):",
              f"{body}cols = start + {rr}",
              f"{body}mask = kmask & (cols < n_cols)"]
    for i, arg in enumerate(desc.inputs):
        if not arg.per_row:
            offset = f"{offsets[i]} + {_col_offset(arg.name, i, layout)}"
            lines.append(f"{body}{arg.name} = {operand_expr(arg, offset, 'mask')}")
    for s in desc.stmts:
        if s.reduce is None and passes.kind[s.var] == ELEM and passes.level[s.var] <= loop:
            lines.append(f"{body}{s.var} = {s.expr}")
        elif s in reduces:
            masked = f"tl.where(mask, {s.expr}, {_neutral_of(s)})"
            lines.append(f"{body}{s.var}_acc = " + _COMBINE[s.reduce].format(a=f"{s.var}_acc", b=masked))
    base = len(desc.inputs)
    for j, out in enumerate(desc.outputs):
        if not out.per_row and passes.level[out.var] == loop:
            offset = f"{offsets[base + j]} + {_col_offset(out.name, base + j, layout)}"
            lines.append(INDENT + store_line(out.name, out.var, out.dtype, offset, "mask"))
    return lines


def _final(stmt, tile: Optional[str] = None) -> str:
    """``tile`` (default: the accumulator) reduced over its row axis, kept 2-D:
    ``[1, BLOCK_K]``."""
    tile = tile or f"{stmt.var}_acc"
    if stmt.reduce == "prod":
        return f"tl.reduce({tile}, 0, _tpg_mul, keep_dims=True)"
    return f"tl.{stmt.reduce}({tile}, axis=0, keep_dims=True)"


#: Partial results the last program of a split reads per load: a loop of one load per split
#: waited on each in turn (an L2 round trip apiece: 16 of them were most of a 44 us layer-norm
#: weight gradient, 4096 x 768, in GPT-2's training step on the H200).
SPLIT_CHUNK = 16


def _last_program(reduces, epilogue: List[str]) -> List[str]:
    """Store this split's partial results, take a ticket; the last program of the column
    block combines all partials in a fixed order (``SPLIT_CHUNK`` splits per load, each
    chunk reduced as a tile), runs ``epilogue`` and resets the counter."""
    lines = [f"{INDENT}tl.store({s.var}_part_ptr + tl.program_id(1) * num_k + ks, {s.var}, "
             "mask=kmask)" for s in reduces]
    lines += [f"{INDENT}tl.debug_barrier()",  # every thread's partials stored before the ticket
              f"{INDENT}ticket = tl.atomic_add(tickets_ptr + tl.program_id(0), 1, sem=\"acq_rel\")",
              f"{INDENT}if ticket == n_split - 1:",
              f"{INDENT * 2}tl.debug_barrier()"]
    body = []
    for s in reduces:
        neutral = _neutral_of(s)
        # .cg: read from L2, where the other programs' partials are; never a stale L1 line
        body += [f"{s.var} = tl.full([1, BLOCK_K], {neutral}, {TL_DTYPES[s.dtype]})",
                 f"for first in range(0, n_split, {SPLIT_CHUNK}):",
                 f"{INDENT}splits = first + tl.arange(0, {SPLIT_CHUNK})[:, None]",
                 f"{INDENT}part = tl.load({s.var}_part_ptr + splits * num_k + ks, "
                 f"mask=kmask & (splits < n_split), other={neutral}, cache_modifier=\".cg\")",
                 f"{INDENT}{s.var} = " + _COMBINE[s.reduce].format(a=s.var, b=_final(s, "part"))]
    body = [INDENT + line for line in body] + list(epilogue)
    body.append(f"{INDENT}tl.atomic_xchg(tickets_ptr + tl.program_id(0), 0)")
    return lines + [INDENT + line for line in body]
