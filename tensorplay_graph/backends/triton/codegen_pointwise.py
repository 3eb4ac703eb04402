"""Render a pointwise ``KernelDesc`` for one layout to ``@triton.jit`` source.

One program handles ``BLOCK_SIZE`` consecutive elements of the flat index
space. Operands laid out like the index space use the flat offset directly
(coalesced, vectorizable); the others get coordinates and their own strides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Tuple

from .codegen_common import INDENT, header, operand_expr, signature_lines, stmt_lines, store_line
from .kernel_desc import KernelDesc
from .layout import Layout


@dataclass(frozen=True)
class KernelSource:
    """Generated source plus how to fill its scalar parameters from a ``Layout``.

    ``params`` lists every non-constexpr parameter in order as a tuple:
    ``("ptr", operand)``, ``("numel",)``, ``("size", dim)``, ``("stride", operand, dim)``,
    ``("n",)``, ``("col_stride", operand)`` or ``("const", name, value)`` (a value fixed per
    launch configuration); operands count inputs, then outputs (then a split column
    kernel's workspaces and ticket counters).
    """

    name: str
    text: str
    params: Tuple[tuple, ...]
    constexprs: Tuple[str, ...]


def operand_names(desc: KernelDesc) -> List[str]:
    return [a.name for a in desc.inputs] + [o.name for o in desc.outputs]


def _coords(ndim: int, index: str, prefix: str) -> List[str]:
    """Lines splitting a flat ``index`` into ``{prefix}0..`` over ``size1..size{ndim-1}``."""
    if ndim == 1:
        return [f"{INDENT}{prefix}0 = {index}"]
    lines, rest = [], index
    for d in range(ndim - 1, 0, -1):
        lines.append(f"{INDENT}{prefix}{d} = {rest} % size{d}")
        nxt = f"{prefix}rest{d}" if d > 1 else f"{prefix}0"
        lines.append(f"{INDENT}{nxt} = {rest} // size{d}")
        rest = nxt
    return lines


def strided_offset(name: str, ndim: int, prefix: str) -> str:
    return " + ".join(f"{prefix}{d} * {name}_stride{d}" for d in range(ndim))


def render_pointwise(desc: KernelDesc, layout: Layout) -> KernelSource:
    """Source of a pointwise kernel for ``layout`` (see ``Layout.signature``)."""
    if layout.tiled():
        return render_tiled(desc, layout)
    desc.validate()
    names = operand_names(desc)
    ndim = len(layout.sizes)
    linear = [layout.is_linear(i) for i in range(len(names))]
    wide = layout.numel >= 2 ** 31
    params: List[tuple] = [("ptr", i) for i in range(len(names))] + [("numel",)]
    params += [("size", d) for d in range(1, ndim)] if not all(linear) else []
    for i, name in enumerate(names):
        if not linear[i]:
            params += [("stride", i, d) for d in range(ndim)]
    text_params = [_param_text(p, names) for p in params]

    dims = " x ".join(str(s) for s in layout.sizes)
    lines = header(desc, f"{dims} elements, flat, BLOCK_SIZE per program")
    lines += signature_lines(desc.name, text_params, ["BLOCK_SIZE"])
    pid = "tl.program_id(0).to(tl.int64)" if wide else "tl.program_id(0)"
    lines += [
        f"{INDENT}pid = {pid}",
        f"{INDENT}offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
        f"{INDENT}mask = offs < numel",
    ]
    if not all(linear):
        lines += _coords(ndim, "offs", "i")
    offsets = ["offs" if linear[i] else strided_offset(n, ndim, "i") for i, n in enumerate(names)]
    for i, arg in enumerate(desc.inputs):
        lines.append(f"{INDENT}{arg.name} = {operand_expr(arg, offsets[i], 'mask')}")
    lines += stmt_lines(desc.stmts, "mask")
    base = len(desc.inputs)
    for j, out in enumerate(desc.outputs):
        lines.append(store_line(out.name, out.var, out.dtype, offsets[base + j], "mask"))
    return KernelSource(desc.name, "\n".join(lines) + "\n", tuple(params), ("BLOCK_SIZE",))


#: How a tiled kernel masks each kind of operand (``Layout.operand_kind``).
_TILE_MASKS = {"linear": "mask", "full": "mask", "cols": "cmask", "rows": "rmask"}


def render_tiled(desc: KernelDesc, layout: Layout) -> KernelSource:
    """Source of a pointwise kernel over 2-d tiles: ``BLOCK_R`` rows (the outer dims,
    flattened) by ``BLOCK_C`` columns (the last dim).

    An operand constant along the rows (a per-channel value of a channels_last tensor) is
    loaded as one ``[1, BLOCK_C]`` row, one constant along the columns as a ``[BLOCK_R, 1]``
    column; what is computed from them alone (batch norm's scale and shift) is computed
    at that shape, once per tile row or column, not per element. Only the tile's row
    indices are split into coordinates.
    """
    desc.validate()
    names = operand_names(desc)
    ndim, outer = len(layout.sizes), len(layout.sizes) - 1
    kinds = [layout.operand_kind(i) for i in range(len(names))]
    coords = any(k in ("rows", "full") for k in kinds)
    params: List[tuple] = [("ptr", i) for i in range(len(names))] + [("rows",), ("cols",)]
    params += [("size", d) for d in range(1, outer)] if coords else []
    for i, kind in enumerate(kinds):
        if kind in ("rows", "full"):
            params += [("stride", i, d) for d in range(outer)]
        if kind in ("cols", "full"):
            params.append(("stride", i, ndim - 1))
    dims = " x ".join(str(s) for s in layout.sizes)
    lines = header(desc, f"{dims} elements, tiles of BLOCK_R rows x BLOCK_C of the last dim")
    lines += signature_lines(desc.name, [_param_text(p, names) for p in params],
                             ["BLOCK_R", "BLOCK_C"])
    wide = layout.numel >= 2 ** 31
    lines += [
        f"{INDENT}pid_r = tl.program_id(0){'.to(tl.int64)' if wide else ''}",
        f"{INDENT}pid_c = tl.program_id(1)",
        f"{INDENT}rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]",
        f"{INDENT}cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]",
        f"{INDENT}rmask = rows < n_rows",
        f"{INDENT}cmask = cols < n_cols",
        f"{INDENT}mask = rmask & cmask",
    ]
    if coords:
        lines += _coords(outer, "rows", "i")
    offsets = [_tile_offset(kind, name, ndim) for kind, name in zip(kinds, names)]
    for i, arg in enumerate(desc.inputs):
        lines.append(f"{INDENT}{arg.name} = "
                     f"{operand_expr(arg, offsets[i], _TILE_MASKS[kinds[i]])}")
    lines += stmt_lines(desc.stmts, "mask")
    base = len(desc.inputs)
    for j, out in enumerate(desc.outputs):
        tile = f"tile{j}"  # a value computed from per-row / per-column operands alone
        lines.append(f"{INDENT}{tile} = tl.broadcast_to({out.var}, (BLOCK_R, BLOCK_C))")
        lines.append(store_line(out.name, tile, out.dtype, offsets[base + j], "mask"))
    return KernelSource(desc.name, "\n".join(lines) + "\n", tuple(params),
                        ("BLOCK_R", "BLOCK_C"))


def _tile_offset(kind: str, name: str, ndim: int) -> str:
    last = f"cols * {name}_stride{ndim - 1}"
    if kind == "linear":
        return "rows * n_cols + cols"
    if kind == "cols":
        return last
    outer = strided_offset(name, ndim - 1, "i")
    return outer if kind == "rows" else f"{outer} + {last}"


def _param_text(param: tuple, names: List[str]) -> str:
    kind = param[0]
    if kind == "ptr":
        return f"{names[param[1]]}_ptr"
    if kind == "size":
        return f"size{param[1]}"
    if kind == "stride":
        return f"{names[param[1]]}_stride{param[2]}"
    if kind == "col_stride":
        return f"{names[param[1]]}_col_stride"
    if kind in ("n", "cols"):
        return "n_cols"
    if kind == "rows":
        return "n_rows"
    return kind
