"""Render a rows ``KernelDesc``: one program per row, the whole row in registers.

This is the shape of Triton's fused-softmax tutorial, generalised: the row's
operands are loaded once, pointwise work before a reduction (residual add,
scaling, casts) and after it (normalisation, activation) is fused, and row
reductions (``tl.sum`` / ``tl.max`` / ``tl.min``) mask padding lanes with their
neutral element. Per-row outputs (a reduction's result) are stored once per row.
"""

from __future__ import annotations

from typing import List

from .codegen_common import (INDENT, combine_function_lines, header, load_expr, signature_lines,
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
    params: List[tuple] = [("ptr", i) for i in range(len(names))] + [("n",)]
    params += [("size", d) for d in range(1, ndim)]
    for i in range(len(names)):
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
    lines += [
        f"{INDENT}cols = tl.arange(0, BLOCK_N)",
        f"{INDENT}mask = cols < n_cols",
    ]
    row_offsets, col_offsets = [], []
    for i, name in enumerate(names):
        row_offsets.append(strided_offset(name, ndim, "r"))
        col_offsets.append("cols" if unit[i] else f"cols * {name}_col_stride")
    for i, arg in enumerate(desc.inputs):
        if arg.per_row:  # a scalar per row: a per-row result computed from it stays a scalar
            lines.append(f"{INDENT}{arg.name} = {load_expr(arg.name, arg.dtype, row_offsets[i], None)}")
            continue
        offset = f"{row_offsets[i]} + {col_offsets[i]}"
        lines.append(f"{INDENT}{arg.name} = {load_expr(arg.name, arg.dtype, offset, 'mask')}")
    lines += stmt_lines(desc.stmts, "mask")
    base = len(desc.inputs)
    for j, out in enumerate(desc.outputs):
        if out.per_row:
            # One value per row; the program's row index is always in range (grid == rows).
            lines.append(store_line(out.name, out.var, out.dtype, row_offsets[base + j]))
        else:
            offset = f"{row_offsets[base + j]} + {col_offsets[base + j]}"
            lines.append(store_line(out.name, out.var, out.dtype, offset, "mask"))
    return KernelSource(desc.name, "\n".join(lines) + "\n", tuple(params), ("BLOCK_N",))
