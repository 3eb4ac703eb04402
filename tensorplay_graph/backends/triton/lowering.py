"""Region -> kernel plans: group a region's nodes into kernels (:mod:`.grouping`) and
describe each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from ..base import node_framework
from ...ir.meta import permuted_strides
from .codegen_reduction import Emitter, RowOps, emit_rule
from ...prims.pointwise_lowerings import HALF_FLOATS, round16_triton
from ...prims.rules import scalar_kept_in_opmath
from .grouping import Group, group_nodes, row_dims  # noqa: F401 - re-exported
from .kernel_desc import (TL_DTYPES, KernelDesc, OutputArg, TensorArg, compute_dtype, is_iota,
                          literal, spelled_otherwise)
from .plan import KernelPlan, PointwiseSpace, RowsSpace
from .operands import (OPERAND_KEYS, integer_operand_dtype, literal_integers,
                       scalar_cast_dtype, is_node, node_meta, round_scalar)

_RESERVED = re.compile(r"^(tl|triton|pid|offs|mask|row|cols|numel|n_cols|BLOCK_SIZE|BLOCK_N|"
                       r"pid_[rc]|rows|[rc]mask|n_rows|BLOCK_[RC]|tile\d+|"
                       r"[ir]\d+|[ir]rest\d+|size\d+|.*_ptr|.*_stride\d*|.*_col_stride)$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Namer:
    """Unique, valid, non-reserved identifiers derived from node names."""

    def __init__(self) -> None:
        self.used: set = set()

    def __call__(self, base: str) -> str:
        base = base if _IDENT.match(base or "") else "v_" + re.sub(r"\W", "_", base or "v")
        if _RESERVED.match(base):
            base = f"{base}_v"
        name, k = base, 1
        while name in self.used or f"{name}_ptr" in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


@dataclass
class Step:
    """One kernel launch: reads ``inputs`` (nodes), produces ``outputs`` (nodes)."""

    plan: KernelPlan
    inputs: List[Any]
    outputs: List[Any]


def _scalar(value: Any) -> Any:
    """A scalar operand as templates take it: a number, or source text where the number's
    own text would not compile to its value (inf / nan, and -0.0: ``kernel_desc.NEG_ZERO``)."""
    return literal(value) if spelled_otherwise(value) else value


def describe(group: Group, name: str, needed_outside: set) -> Tuple[KernelDesc, List[Any], List[Any], Any]:
    """The ``KernelDesc`` of one group, its input and output nodes, and its index space."""
    namer, em = Namer(), Emitter()
    var_of: Dict[Any, str] = {}
    inputs: List[Any] = []
    in_args: List[TensorArg] = []
    flags: List[bool] = []
    # An outside operand read by a per-row node whose reduced dims were dropped is aligned
    # per row; read by a full-shape node, with the trailing dims: one argument per reading.
    arg_of: Dict[Tuple[Any, bool], str] = {}
    members = set(group.nodes)
    for node in group.nodes:
        for v, drop in _outside_operands(group, node, members):
            if (v, drop) not in arg_of:
                tm = node_meta(v)
                arg = arg_of[(v, drop)] = namer(v.name)
                inputs.append(v)
                flags.append(drop)
                per_row = group.kind == "rows" and _constant_along_row(group, tuple(tm.shape), drop)
                in_args.append(TensorArg(arg, tm.dtype, per_row=per_row, iota=is_iota(v)))
                em.dtypes[arg] = compute_dtype(tm.dtype)
                em.per_row[arg] = per_row
    n = 1
    for d in group.dims or ():
        n *= group.shape[d]
    for node in group.nodes:
        var_of.update((v, arg_of[(v, drop)]) for v, drop in _outside_operands(group, node, members))
        var_of[node] = _emit_node(em, node, namer(node.name), var_of, n)
    outputs = [node for node in group.nodes if node in needed_outside]
    out_args = []
    for node in outputs:
        tm = node_meta(node)
        out_args.append(OutputArg(namer(f"{node.name}_out"), var_of[node], tm.dtype,
                                  per_row=group.per_row(tuple(tm.shape))))
    desc = KernelDesc(name, group.kind, in_args, em.stmts, out_args, [n.name for n in group.nodes])
    if group.kind == "pointwise":
        # Outputs are written with eager's strides (channels_last stays channels_last).
        space = PointwiseSpace(group.shape, [permuted_strides(node_meta(o)) for o in outputs])
    else:
        flags += [len(node_meta(o).shape) < len(group.shape) for o in outputs]
        space = RowsSpace(group.shape, group.dims, flags)
    return desc, inputs, outputs, space


def _outside_operands(group: Group, node: Any, members: set) -> List[Tuple[Any, bool]]:
    """(operand, dropped) for each tensor ``node`` reads from outside the group; ``dropped``:
    it holds one value per row without the reduced dims (a per-row pointwise node's
    operand, or an argument the prim's row builder lists as ``per_row``)."""
    drop = _reads_dropped(group, node)
    prim = node.meta["prim"]
    per_row = () if prim.kind == "pointwise" else getattr(prim.lowering("triton"), "per_row", ())
    out = []
    for key, value in node.meta["prim_args"].items():
        for v in (value if isinstance(value, (list, tuple)) else (value,)):
            item = (v, drop or key in per_row)
            if is_node(v) and v not in members and item not in out:
                out.append(item)
    return out


def _reads_dropped(group: Group, node: Any) -> bool:
    """True when ``node`` is a per-row pointwise node whose reduced dims were dropped."""
    if node.meta["prim"].kind != "pointwise":
        return False
    shape = tuple(node_meta(node).shape)
    return group.per_row(shape) and len(shape) < len(group.shape)


def _constant_along_row(group: Group, shape: Tuple[int, ...], dropped: bool) -> bool:
    """True when an operand of ``shape`` broadcasts to one value per row of ``group``."""
    if dropped:
        return True
    padded = (1,) * (len(group.shape) - len(shape)) + shape
    return len(shape) <= len(group.shape) and all(padded[d] == 1 for d in group.dims)


def _emit_node(em: Emitter, node: Any, var: str, var_of: Dict[Any, str], n: int) -> str:
    prim, args = node.meta["prim"], node.meta["prim_args"]
    tm = node_meta(node)
    src = node.name

    def ref(value: Any, to_float: bool = False):
        if is_node(value):
            name = var_of[value]
            return em.as_float(name, tm.dtype) if to_float else name
        return _scalar(value)

    if prim.kind == "pointwise":
        floating = tm.dtype in ("float16", "bfloat16", "float32", "float64")
        half = scalar_cast_dtype(node, prim, args)
        mapped = {k: ref(round_scalar(v, half) if half and k in OPERAND_KEYS and not
                         scalar_kept_in_opmath(prim, k, half, node_framework(node)) else v,
                         floating and k != "cond") for k, v in args.items()}
        # compute "none": the template takes its operands as they are (casts, logic).
        common = None if floating or prim.compute == "none" else integer_operand_dtype(args)
        if common is not None:
            # Triton's own integer promotion differs from eager's (int8 with uint8 stays
            # 8-bit; int1 + int1 wraps to 0): compute in eager's promoted dtype, bools as int8.
            work = "int8" if common == "bool" else common
            mapped = {k: em.cast(v, work) if k in OPERAND_KEYS and is_node(args[k]) else v
                      for k, v in mapped.items()}
        variant = "triton_integer" if common is not None and \
            prim.lowering("triton_integer") is not None else "triton"
        if variant == "triton" and tm.dtype == "float64" and \
                prim.lowering("triton_float64") is not None:
            variant = "triton_float64"
        expr = prim.render(variant, **mapped)
        if literal_integers(prim, args, tm.dtype):
            # Triton types int literals int32 (``where(c, -1, -1)``); eager's result is int64
            # (seed 20001675: an int64 amax's neutral then overflowed the int32 block)
            expr = f"({expr}).to({TL_DTYPES[compute_dtype(tm.dtype)]})"
        if common == "bool" and tm.dtype == "bool":
            expr = f"({expr} != 0)"
        if tm.dtype in HALF_FLOATS:
            # eager rounds each 16-bit op's result to its dtype; the kernel computes in fp32
            # (rounding is idempotent: a cast that already rounded is unchanged)
            expr = round16_triton(expr, tm.dtype)
        per_row = any(em.per_row.get(var_of.get(v, ""), False) for v in args.values() if is_node(v))
        return em.emit(var, expr, compute_dtype(tm.dtype), src, per_row=per_row)
    row = RowOps(em, var, src, n, node_meta(args["a"]).dtype, tm.dtype, tm.device_type,
                 node_framework(node))
    result = emit_rule(row, prim.lowering("triton"), {k: ref(v) for k, v in args.items()})
    if tm.dtype in HALF_FLOATS:
        # eager's 16-bit softmax / norm / sum is rounded before anything reads it; the row
        # builders compute in fp32 and only the store rounded, so a reader in the same
        # kernel saw the fp32 value (``softmax(x) != where(m, softmax(x), y)``, seed 84003764)
        result = em.emit(f"{var}_rounded", round16_triton(result, tm.dtype),
                         compute_dtype(tm.dtype), src, per_row=em.per_row.get(result, False))
    return result


def plan_region(region: Any, cache=None) -> List[Step]:
    """Kernel steps for ``region`` (nodes carry prim, prim_args and tensor_meta)."""
    if any(n.meta["prim"].kind in ("view", "gather") for n in region.nodes):
        from .cache import default_cache
        from .indexed_region import plan_indexed

        def describe_group(group: Group, gi: int, needed: set) -> Step:
            desc, inputs, outputs, space = describe(group, f"tpg_{group.kind}_r{region.id}_k{gi}",
                                                    needed)
            shapes = [tuple(node_meta(o).shape) for o in outputs]
            return Step(KernelPlan(desc, space, shapes, cache=cache), inputs, outputs)
        return plan_indexed(region, cache or default_cache(), Step, group_nodes, describe_group,
                            Namer, _emit_node)
    groups = group_nodes(list(region.nodes))
    steps = []
    for gi, (group, needed) in enumerate(zip(groups, needed_outputs(groups, region))):
        desc, inputs, outputs, space = describe(group, f"tpg_{group.kind}_r{region.id}_k{gi}", needed)
        shapes = [tuple(node_meta(o).shape) for o in outputs]
        steps.append(Step(KernelPlan(desc, space, shapes, cache=cache), inputs, outputs))
    return steps


def needed_outputs(groups: List[Any], region: Any) -> List[set]:
    """Per group, the nodes it must write: the region's outputs and every node a later
    group (or a node outside the region) reads."""
    node_group = {node: gi for gi, g in enumerate(groups) for node in g.nodes}
    needed = []
    for gi, group in enumerate(groups):
        want = set(region.outputs)
        for node in group.nodes:
            if any(node_group.get(u, -1) != gi for u in node.users):
                want.add(node)
        needed.append(want)
    return needed
