"""Eager GEMMs whose rows are not 16-byte aligned: the rewrite that sends them to aligned ones.

Only large float16 / bfloat16 CUDA GEMMs that no backend claimed change; ``TPG_PAD_LINEARS=0``
turns it off. A misaligned linear goes to :mod:`.aligned_linear` (eager's layout written by
aligned GEMMs, or a padded weight and a copy out).

Training adds the same problem on the inputs: the LM head's backward multiplies the (8x512,
50257) logits gradient by the weight (K = 50257: the gradient's rows are misaligned) and its
transpose by the hidden states (the transposed gradient's leading dimension is 50257), and
cuBLAS ran both through alignment-1 CUTLASS kernels (4.6 ms of a 12.2 ms GPT-2 step on the
H200). :func:`aligned_matmul` copies each misaligned operand once into zero-padded rows (zeros
in K add nothing to a product; padded M / N rows are sliced off), keeping a transposed
operand transposed so the copy stays coalesced.

>>> rewrite_misaligned_gemms(lowered_graph_module)      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import operator
import os
from typing import Any, Optional, Tuple

from ..frameworks import adapter_for
from ..prims.lowering import Gemm
from .aligned_linear import (ALIGN, PaddedRowsWeight, first_columns, interleaved_linear,
                             padded_linear, padded_weight_linear, padding)
from .row_copy import copy_rows

log = logging.getLogger("tensorplay_graph.compile")

MIN_ELEMENTS = 1 << 20  # below this the extra copy costs more than the slow kernel


def _layout(x: Any) -> Tuple[bool, bool]:
    """``(column-major, aligned)`` of a 2-D operand as cuBLAS reads it without a copy."""
    rows, cols = x.shape
    s0, s1 = x.stride()
    aligned_ptr = x.data_ptr() % (2 * ALIGN) == 0
    if s1 == 1 and s0 >= max(cols, 1):
        return False, aligned_ptr and s0 % ALIGN == 0
    if s0 == 1 and s1 >= max(rows, 1):
        return True, aligned_ptr and s1 % ALIGN == 0
    return False, False  # neither layout: cuBLAS gets a copy anyway


def _padded(x: Any, rows: int, cols: int, col_major: bool) -> Any:
    """``x`` with ``rows`` / ``cols`` zero rows / columns added, in ``x``'s orientation."""
    F = adapter_for("torch").functional()
    if col_major:
        return F.pad(x.t(), (0, rows, 0, cols)).contiguous().t()
    return F.pad(x, (0, cols, 0, rows)).contiguous()


def gemm_padding(a: Any, b: Any, pad_a: bool = False) -> Optional[Tuple[int, int, int, bool, bool]]:
    """``(pad M, pad K, pad N, copy a, copy b)`` that gives ``a @ b`` (2-D) aligned operands
    and output rows, or None when it has them already. ``pad_a``: ``a``'s extents are padded
    even where its rows are aligned (a zero-padded buffer holds it already: cuBLAS ran
    K = 50257 with an aligned row pitch 5.3x slower than K padded to 50264 on the H200)."""
    (m, k), n = a.shape, b.shape[1]
    col_a, ok_a = _layout(a)
    col_b, ok_b = _layout(b)
    copy_a, copy_b = not ok_a or pad_a, not ok_b
    pad_m = pad_k = 0
    pad_n = padding(n)
    copy_b = copy_b or bool(pad_n)
    for _ in range(2):  # a copy's leading dimension is its padded extent: pads propagate
        if copy_a:
            pad_m, pad_k = (padding(m), pad_k) if col_a else (pad_m, padding(k))
        if copy_b:
            pad_k, pad_n = (padding(k), pad_n) if col_b else (pad_k, padding(n))
        if pad_k:  # both operands' K must match
            copy_a = copy_b = True
    if not (copy_a or copy_b):
        return None
    return pad_m, pad_k, pad_n, copy_a, copy_b


def padded_columns(x: Any) -> Any:
    """``x`` as the row-major matrix of its last dimension, zero columns added up to
    :data:`ALIGN`: one copy that every GEMM reading ``x`` or its transpose can share (the LM
    head's gradient feeds two). It remembers its source, so a GEMM only takes it when its
    own operand is that same matrix (:func:`_from_shared`)."""
    torch = adapter_for("torch").module
    rows = x.reshape(-1, x.shape[-1])
    count, width = rows.shape
    out = torch.empty((count, width + padding(width)), dtype=rows.dtype, device=rows.device)
    out[:, width:].zero_()  # only the padding: the copy below writes the rest
    copy_rows(out[:, :width], rows)
    out.tpg_source = (rows.data_ptr(), tuple(rows.shape), rows.stride(), rows._version)
    return out


def padded_base(x: Any) -> Any:
    """The zero-padded ``(rows, pitch)`` buffer ``x`` was written into by its kernel
    (:func:`_producer_pads`), as :func:`padded_columns` would have copied it; that copy when
    ``x`` is not laid out so (its kernel fell back to eager)."""
    rows = x.reshape(-1, x.shape[-1])
    count, width = rows.shape
    pitch = width + padding(width)
    end = (rows.storage_offset() + count * pitch) * rows.element_size()
    if rows.stride() != (pitch, 1) or rows.untyped_storage().nbytes() < end:
        return padded_columns(x)
    out = rows.as_strided((count, pitch), (pitch, 1))
    out.tpg_source = (rows.data_ptr(), tuple(rows.shape), rows.stride(), rows._version)
    return out


def _from_shared(flat: Any, shared: Any, pad_m: int, pad_k: int) -> Any:
    """``shared`` (or its transpose) when it is the padded copy ``flat`` needs, else None."""
    col = _layout(flat)[0]
    matrix, pad, other = (flat.t(), pad_m, pad_k) if col else (flat, pad_k, pad_m)
    source = (matrix.data_ptr(), tuple(matrix.shape), matrix.stride(), matrix._version)
    if getattr(shared, "tpg_source", None) != source or other or \
            shared.shape[1] != matrix.shape[1] + pad:
        return None
    return shared.t() if col else shared


def aligned_matmul(a: Any, b: Any, shared: Any = None) -> Any:
    """``torch.matmul(a, b)`` for a 2-D ``b``, through zero-padded copies of whichever operand
    cuBLAS would read misaligned (see the module docstring); eager's values and layout.
    ``shared``: a :func:`padded_columns` copy of ``a``'s matrix (or the :func:`padded_base`
    buffer its kernel wrote), used instead of a new one."""
    torch = adapter_for("torch").module
    if a.dim() < 2 or b.dim() != 2:
        return torch.matmul(a, b)
    flat = a.reshape(-1, a.shape[-1])
    lhs = plan = None
    if shared is not None:  # the shared buffer pads ``a`` at no cost: take it when it fits
        plan = gemm_padding(flat, b, pad_a=True)
        lhs = _from_shared(flat, shared, *plan[:2]) if plan is not None else None
    if lhs is None:
        plan = gemm_padding(flat, b)
    if plan is None:
        return torch.matmul(a, b)
    pad_m, pad_k, pad_n, copy_a, copy_b = plan
    if lhs is None and pad_n:
        # ``a @ W.t()`` with W (N, K) contiguous is ``linear(a, W)``: eager's layout written in
        # place, not a padded product and its copy (``x @ wte.weight.T``; GPT-2's LM head
        # written so: 0.475 ms of copy per call, H200, ``benchmarks/loss_walk_gpu.py``).
        # interleaved_linear declines every other layout.
        out = interleaved_linear(a, b.t(), None, b.shape[1])
        if out is not None:
            return out
    if lhs is None:
        lhs = _padded(flat, pad_m, pad_k, _layout(flat)[0]) if copy_a else flat
    rhs = _padded(b, pad_k, pad_n, _layout(b)[0]) if copy_b else b
    out = torch.mm(lhs, rhs)[:flat.shape[0]]
    out = first_columns(out, b.shape[1]) if pad_n else out
    return out.reshape(*a.shape[:-1], b.shape[1])


def _half_cuda(meta: Any) -> bool:
    return (hasattr(meta, "shape") and getattr(meta, "device_type", None) == "cuda"
            and meta.dtype in ("float16", "bfloat16"))


def _misaligned_matmul(node: Any) -> bool:
    """An unclaimed large 16-bit CUDA ``matmul`` by a matrix with a dim off the alignment."""
    prim = node.meta.get("prim")
    if getattr(prim, "name", None) != "matmul" or "kernel" in node.meta:
        return False
    args = node.meta.get("prim_args") or {}
    metas = [getattr(args.get(key), "meta", {}).get("tensor_meta") for key in ("a", "b")]
    if not all(_half_cuda(m) for m in metas) or len(metas[1].shape) != 2 or len(metas[0].shape) < 2:
        return False
    a, b = metas
    dims = [a.shape[-1], b.shape[-1]]
    if a.stride is None or a.stride[-1] != 1:  # M is a's leading dimension when transposed
        dims.append(a.shape[-2])
    return any(d % ALIGN for d in dims) and max(a.numel, b.numel) >= MIN_ELEMENTS


def _misaligned_linear(node: Any) -> bool:
    prim = node.meta.get("prim")
    meta = node.meta.get("tensor_meta")
    rule = prim.lowering("tilelang") if prim is not None else None
    # linear's record: one GEMM whose weight is stored (N, K), with an optional bias epilogue
    if not (isinstance(rule, Gemm) and rule.rhs_transposed and (rule.lhs, rule.rhs) == ("a", "weight")
            and rule.epilogue_operands in ((), ("bias",))):
        return False
    if "kernel" in node.meta or not hasattr(meta, "shape"):
        return False
    args = node.meta.get("prim_args") or {}
    weight = args.get("weight")
    wmeta = getattr(weight, "meta", {}).get("tensor_meta")
    return (meta.device_type == "cuda" and meta.dtype in ("float16", "bfloat16")
            and hasattr(wmeta, "shape") and len(wmeta.shape) == 2 and wmeta.dtype == meta.dtype
            and meta.shape[-1] % ALIGN != 0 and meta.numel >= MIN_ELEMENTS
            and len(meta.shape) >= 1 and all(hasattr(args.get(key), "meta") or args.get(key) is None
                                               for key in ("a", "bias")))


def rewrite_misaligned_gemms(module: Any, cache_weights: bool = True) -> Any:
    """Point every unclaimed misaligned linear of ``module``'s graph at :func:`padded_linear`
    (at :func:`padded_weight_linear` through a :class:`PaddedRowsWeight` for a weight from
    the program's state, with ``cache_weights``) and every such matmul at
    :func:`aligned_matmul`."""
    graph = getattr(module, "graph", None)
    if graph is None or os.environ.get("TPG_PAD_LINEARS", "1") in ("0", ""):
        return module
    changed = []
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method"):  # VJP rules emit ``g.matmul(w)``
            continue
        if _misaligned_linear(node):
            args = node.meta["prim_args"]
            weight = args["weight"]
            k = weight.meta["tensor_meta"].shape[-1]
            # with K aligned, interleaved_linear reads the weight as it is: nothing to cache
            if cache_weights and k % ALIGN and weight.op in ("get_attr", "placeholder"):
                with graph.inserting_before(node):
                    padded = graph.call_function(PaddedRowsWeight(), (weight,),
                                                 name=f"{weight.name}_padded")
                meta = weight.meta["tensor_meta"]
                n = meta.shape[0]
                padded.meta["tensor_meta"] = meta.with_(shape=(n + padding(n), *meta.shape[1:]))
                node.target = padded_weight_linear
                node.args = (args["a"], padded, args.get("bias"), n)
            else:
                node.target = padded_linear
                node.args = (args["a"], weight, args.get("bias"))
        elif _misaligned_matmul(node):
            args = node.meta["prim_args"]
            node.target = aligned_matmul
            node.args = (args["a"], args["b"])
        else:
            continue
        node.op, node.kwargs = "call_function", {}
        changed.append(node.name)
    _share_padded_operands(graph, [n for n in graph.nodes if n.target is aligned_matmul])
    if changed:
        module.recompile()
        log.info("GEMM(s) %s: operands padded to multiples of %d for cuBLAS's aligned kernels",
                 ", ".join(changed), ALIGN)
    return module


_TRANSPOSES = {("t",), ("transpose", 0, 1), ("transpose", 1, 0), ("transpose", -1, -2),
               ("transpose", -2, -1)}


def _matrix_root(node: Any) -> Any:
    """The node whose last-dimension matrix ``node`` is (through a 2-D transpose and
    reshapes / views that keep the last dimension), or None. A hint only: the GEMM checks
    at run time that the storage and layout really match (:func:`_from_shared`)."""
    if getattr(node, "op", None) == "call_method" and (node.target, *node.args[1:]) in _TRANSPOSES:
        node = node.args[0]
    while getattr(node, "op", None) == "call_method" and node.target in ("reshape", "view"):
        source = node.args[0]
        shapes = [getattr(n.meta.get("tensor_meta"), "shape", None) if hasattr(n, "meta") else None
                  for n in (node, source)]
        if None in shapes or not shapes[0] or not shapes[1] or shapes[0][-1] != shapes[1][-1]:
            break
        node = source
    return node if hasattr(node, "meta") else None


def _share_padded_operands(graph: Any, gemms: list) -> None:
    """Misaligned GEMMs that read the same matrix (the LM head's logits gradient, once as is
    and once transposed): the generated kernel producing it writes it into padded rows
    (:mod:`.padded_rows`: no copy at all), else one :func:`padded_columns` copy serves them
    all (a copy of 412 MB and 0.47 ms per GPT-2 step on the H200 instead of two)."""
    groups: dict = {}
    for node in gemms:
        root = _matrix_root(node.args[0])
        meta = root.meta.get("tensor_meta") if root is not None else None
        if meta is not None and getattr(meta, "shape", None) and meta.shape[-1] % ALIGN:
            groups.setdefault(root, []).append(node)
    for root, users in groups.items():
        width = root.meta["tensor_meta"].shape[-1]
        share = padded_columns
        if _producer_pads(root, width, width + padding(width)):
            log.info("%s is written into rows padded to %d elements by its kernel",
                     root.name, width + padding(width))
            share = padded_base
        elif len(users) < 2:
            continue
        with graph.inserting_before(users[0]):
            shared = graph.call_function(share, (root,))
        for node in users:
            node.args = (*node.args[:2], shared)


_READS_ANY_STRIDES = ("reshape", "view", "t", "transpose")


def _producer_pads(root: Any, width: int, pitch: int) -> bool:
    """Ask the generated kernel whose output ``root`` views (through reshapes) to write it into
    rows of ``pitch`` elements, when only views and GEMMs read it -- they take any strides, and
    with an aligned row pitch cuBLAS needs no padded copy. True when the kernel agreed."""
    node = root
    while getattr(node, "op", None) == "call_method" and node.target in ("reshape", "view"):
        node = node.args[0]
    if getattr(node, "op", None) != "call_function" or node.target is not operator.getitem:
        return False
    call, position = node.args
    hook = getattr(getattr(call, "target", None), "pad_rows", None)
    if hook is None or not isinstance(position, int) or not _read_by_gemms_only(node):
        return False
    return bool(hook(position, width, pitch))


def _read_by_gemms_only(node: Any) -> bool:
    for user in node.users:
        if user.op == "call_method" and user.target in _READS_ANY_STRIDES:
            if not _read_by_gemms_only(user):
                return False
        elif not (user.op == "call_function" and user.target in (aligned_matmul, padded_base)):
            return False
    return True
