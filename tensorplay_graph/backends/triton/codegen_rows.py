"""Render a rows ``KernelDesc``: one program per row, the whole row in registers.

This is the shape of Triton's fused-softmax tutorial, generalised: the row's
operands are loaded once, pointwise work before a reduction (residual add,
scaling, casts) and after it (normalisation, activation) is fused, and row
reductions (``tl.sum`` / ``tl.max`` / ``tl.min``) mask padding lanes with their
neutral element. Per-row outputs (a reduction's result) are stored once per row.
"""

from __future__ import annotations

from typing import List

from .codegen_common import (INDENT, combine_function_lines, header, operand_expr, signature_lines,
                             stmt_lines, store_line)
from .codegen_pointwise import KernelSource, _coords, _param_text, operand_names, strided_offset
from .kernel_desc import KernelDesc
from .layout import Layout

#: Longest row a rows kernel keeps in registers (elements).
MAX_ROW = 32768


def render_rows(desc: KernelDesc, layout: Layout) -> KernelSource:
    """Source of a rows kernel for ``layout`` (``layout.n`` columns per row)."""
    desc.validate()
    names = operand_names(desc)
    ndim = len(layout.sizes)
    wide = layout.numel >= 2 ** 31
    per_row_out = [a.per_row for a in desc.inputs] + [o.per_row for o in desc.outputs]
    # Per-row outputs never use a column offset; give them no column-stride parameter.
    unit = [c == 1 or pr for c, pr in zip(layout.col_strides, per_row_out)]
    # An operand the same for every row (a norm's weight) is addressed by the column alone.
    shared = [layout.same_every_row(i) for i in range(len(names))]
    params: List[tuple] = [("ptr", i) for i in range(len(names))] + [("n",)]
    params += [("size", d) for d in range(1, ndim)]
    for i in range(len(names)):
        if not shared[i]:
            params += [("stride", i, d) for d in range(ndim)]
        if not unit[i]:
            params.append(("col_stride", i))
    text_params = [_param_text(p, names) for p in params]

    rows = " x ".join(str(s) for s in layout.sizes)
    lines = header(desc, f"{rows} rows of {layout.n} elements, one row per program")
    lines += combine_function_lines(desc.stmts)
    lines += signature_lines(desc.name, text_params, ["BLOCK_N"])
    row = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    lines += [f"{INDENT}row = {row}"]
    lines += _coords(ndim, "row", "r")
    lines.append(f"{INDENT}cols = tl.arange(0, BLOCK_N)")
    # A row that fills its block exactly needs no mask: measured on the H200, the masked
    # add + layer_norm + gelu of 4096-wide rows took 9% longer.
    mask = "" if layout.full_rows() else "mask"
    if mask:
        lines.append(f"{INDENT}mask = cols < n_cols")
    offsets = []
    for i, name in enumerate(names):
        row_offset = "" if shared[i] else strided_offset(name, ndim, "r")
        col_offset = "cols" if unit[i] else f"cols * {name}_col_stride"
        if per_row_out[i]:
            offsets.append(row_offset or "0")
        else:
            offsets.append(f"{row_offset} + {col_offset}" if row_offset else col_offset)
    # Whole-row operands are loaded where first used (``stmt_lines``); a per-row input is
    # one scalar per row, loaded up front so its latency hides behind the row's loads
    # (H200: a cross-entropy's target loaded after the row's reductions fell from 1.12x
    # Inductor to 0.99x); a per-row result computed from it stays a scalar.
    loads = {}
    for i, arg in enumerate(desc.inputs):
        line = f"{INDENT}{arg.name} = " + operand_expr(arg, offsets[i],
                                                       None if arg.per_row else mask)
        if arg.per_row:
            lines.append(line)
        else:
            loads[arg.name] = line
    lines += stmt_lines(desc.stmts, mask, loads, "BLOCK_N")
    base = len(desc.inputs)
    for j, out in enumerate(desc.outputs):
        # A per-row output stores one value per row; the program's row is always in range.
        lines.append(store_line(out.name, out.var, out.dtype, offsets[base + j],
                                "" if out.per_row else mask))
    return KernelSource(desc.name, "\n".join(lines) + "\n", tuple(params), ("BLOCK_N",))
