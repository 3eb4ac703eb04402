"""Render a rows ``KernelDesc``: one program per row, the whole row in registers.

This is the shape of Triton's fused-softmax tutorial, generalised: the row's
operands are loaded once, pointwise work before a reduction (residual add,
scaling, casts) and after it (normalisation, activation) is fused, and row
reductions (``tl.sum`` / ``tl.max`` / ``tl.min``) mask padding lanes with their
neutral element. Per-row outputs (a reduction's result) are stored once per row.
"""

from __future__ import annotations

from typing import List

from .codegen_common import INDENT, header, load_expr, signature_lines, stmt_lines, store_line
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


#: Row-wise fused patterns this backend lowers (prim kind ``norm``).
NORM_PRIMS = ("softmax", "log_softmax", "layer_norm", "rms_norm")

_EPS = {"float16": 0.0009765625, "bfloat16": 0.0078125, "float32": 1.1920928955078125e-07,
        "float64": 2.220446049250313e-16}


def emit_norm(em, prim: str, a: str, out: str, in_dtype: str, n: int, source: str,
              weight: str = None, bias: str = None, eps=None) -> str:
    """Emit a row-wise pattern over rows of ``n`` elements; returns the value name.

    ``em`` is a ``codegen_reduction.Emitter``; ``a``/``weight``/``bias`` are value names.
    """
    from .kernel_desc import literal
    x = em.as_float(a, in_dtype)
    cdt = "float64" if in_dtype == "float64" else "float32"
    if prim in ("softmax", "log_softmax"):
        top = em.emit(f"{out}_max", x, cdt, source, reduce="max")
        shifted = em.emit(f"{out}_shift", f"{x} - {top}", cdt, source)
        num = em.emit(f"{out}_exp", f"tl.exp({shifted})", cdt, source)
        den = em.emit(f"{out}_den", num, cdt, source, reduce="sum")
        if prim == "softmax":
            return em.emit(out, f"{num} / {den}", cdt, source)
        return em.emit(out, f"{shifted} - tl.log({den})", cdt, source)
    if prim == "layer_norm":
        total = em.emit(f"{out}_sum", x, cdt, source, reduce="sum")
        mean = em.emit(f"{out}_mean", f"{total} / {literal(float(n))}", cdt, source, per_row=True)
        dev = em.emit(f"{out}_dev", f"{x} - {mean}", cdt, source)
        sq = em.emit(f"{out}_sq", f"{dev} * {dev}", cdt, source, reduce="sum")
        rstd = em.emit(f"{out}_rstd", f"1.0 / tl.sqrt({sq} / {literal(float(n))} + {literal(float(eps))})",
                       cdt, source, per_row=True)
        y = f"{dev} * {rstd}"
    elif prim == "rms_norm":
        eps = _EPS.get(in_dtype, _EPS["float32"]) if eps is None else eps
        sq = em.emit(f"{out}_sq", f"{x} * {x}", cdt, source, reduce="sum")
        rstd = em.emit(f"{out}_rstd", f"1.0 / tl.sqrt({sq} / {literal(float(n))} + {literal(float(eps))})",
                       cdt, source, per_row=True)
        y = f"{x} * {rstd}"
    else:
        from ...errors import LoweringError
        raise LoweringError(f"triton backend: row pattern {prim!r} has no lowering "
                            f"(supported: {', '.join(NORM_PRIMS)})")
    if weight is not None:
        y = f"({y}) * {em.as_float(weight)}"
    if bias is not None:
        y = f"{y} + {em.as_float(bias)}"
    return em.emit(out, y, cdt, source)
