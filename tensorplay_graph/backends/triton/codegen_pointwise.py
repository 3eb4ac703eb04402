"""Render a pointwise ``KernelDesc`` for one layout to ``@triton.jit`` source.

One program handles ``BLOCK_SIZE`` consecutive elements of the flat index
space. Operands laid out like the index space use the flat offset directly
(coalesced, vectorizable); the others get coordinates and their own strides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from .codegen_common import INDENT, header, load_expr, signature_lines, stmt_lines, store_line
from .kernel_desc import KernelDesc
from .layout import Layout


@dataclass(frozen=True)
class KernelSource:
    """Generated source plus how to fill its scalar parameters from a ``Layout``.

    ``params`` lists every non-constexpr parameter in order as a tuple:
    ``("ptr", operand)``, ``("numel",)``, ``("size", dim)``, ``("stride", operand, dim)``,
    ``("n",)``, ``("col_stride", operand)`` or ``("const", name, value)`` (a value fixed per
    launch configuration); operands count inputs, then outputs (then workspaces). ``next``:
    a kernel launched right after this one over the same operands (a two-stage reduction).
    """

    name: str
    text: str
    params: Tuple[tuple, ...]
    constexprs: Tuple[str, ...]
    next: Optional["KernelSource"] = None


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
        lines.append(f"{INDENT}{arg.name} = {load_expr(arg.name, arg.dtype, offsets[i], 'mask')}")
    lines += stmt_lines(desc.stmts, "mask")
    base = len(desc.inputs)
    for j, out in enumerate(desc.outputs):
        lines.append(store_line(out.name, out.var, out.dtype, offsets[base + j], "mask"))
    return KernelSource(desc.name, "\n".join(lines) + "\n", tuple(params), ("BLOCK_SIZE",))


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
    if kind == "n":
        return "n_cols"
    return kind
