"""Compile generated kernels for Hopper (sm_90) without a GPU.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` runs the
whole Triton pipeline to PTX and cubin on a CPU-only machine; it is how CI
checks that every generated kernel builds for the GPU it will run on. Must run
without ``TRITON_INTERPRET`` (the interpreter never compiles).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Optional

from .cache import KernelCache, default_cache
from .codegen_pointwise import KernelSource
from .kernel_desc import KernelDesc
from .layout import Layout

_PTR = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "float64": "*fp64",
        "int8": "*i8", "int16": "*i16", "int32": "*i32", "int64": "*i64", "uint8": "*u8",
        "bool": "*i1"}


def signature_of(desc: KernelDesc, source: KernelSource, layout: Layout) -> Dict[str, str]:
    """Triton signature (param -> type) of a generated kernel for ``layout``; pointers past
    the operands are a split column kernel's workspaces (one per reduction, its compute
    dtype), then its int32 ticket counters."""
    dtypes = [a.dtype for a in desc.inputs] + [o.dtype for o in desc.outputs]
    dtypes += [s.dtype for s in desc.stmts if s.reduce is not None] + ["int32"]
    int_type = "i64" if layout.numel >= 2 ** 31 else "i32"
    sig: Dict[str, str] = {}
    for i, param in enumerate(source.params):
        sig[f"p{i}"] = _PTR[dtypes[param[1]]] if param[0] == "ptr" else int_type
    for name in source.constexprs:
        sig[name] = "constexpr"
    return sig


def compile_for_hopper(desc: KernelDesc, source: KernelSource, layout: Layout,
                       constexprs: Dict[str, int], num_warps: int = 4,
                       cache: Optional[KernelCache] = None) -> Dict[str, Any]:
    """Build ``source`` for sm_90; returns {"ptx": str, "cubin_bytes": int, "seconds": float}."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    fn = (cache or default_cache()).jit_function(source.name, source.text)
    start = time.perf_counter()
    # the cache keeps the canonical form (renamed parameters): same order, new names
    signature = dict(zip(fn.arg_names, signature_of(desc, source, layout).values()))
    src = ASTSource(fn, signature, constexprs=dict(constexprs))
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    return {"ptx": compiled.asm.get("ptx", ""), "cubin_bytes": len(compiled.asm.get("cubin", b"")),
            "cubin": compiled.asm.get("cubin", b""), "seconds": time.perf_counter() - start}


def check_plan(plan: Any, in_meta) -> Dict[str, Any]:
    """Compile-check a ``KernelPlan`` for the layout of ``in_meta`` [(shape, stride), ...]."""
    from .columns import config_for
    from .layout import next_pow2
    from .plan import row_warps, tile_2d
    if hasattr(plan, "kernel"):  # an IndexedPlan (views / gathers as index arithmetic)
        return check_indexed(plan, in_meta)
    layout = plan.layout_for(in_meta)
    source = plan.render(layout)
    if "BLOCK_C" in source.constexprs:
        block_c, block_r = tile_2d(layout.numel // layout.sizes[-1], layout.sizes[-1])
        constexprs, warps = {"BLOCK_R": block_r, "BLOCK_C": block_c}, 4
    elif layout.n is None:
        constexprs, warps = {"BLOCK_SIZE": 1024}, 4
    elif any(p[0] == "const" for p in source.params):
        cfg = config_for(plan.desc, layout)
        constexprs = {"BLOCK_R": cfg.block_r, "BLOCK_K": cfg.block_k, "STAGES": cfg.stages}
        warps = cfg.warps
    else:
        block = next_pow2(layout.n)
        constexprs, warps = {"BLOCK_N": block}, row_warps(block)
    return compile_for_hopper(plan.desc, source, layout, constexprs, warps, plan.cache)


def check_indexed(plan: Any, in_meta) -> Dict[str, Any]:
    """Compile-check an ``IndexedPlan`` (codegen_indexed) for ``in_meta``: operand and output
    pointers, then i32 strides, ``BLOCK_SIZE`` 1024."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    source = plan.render(plan.layout_for(in_meta))
    fn = plan.cache.jit_function(source.name, source.text)
    nodes = list(plan.kernel.inputs) + list(plan.kernel.outputs)
    types = [_PTR[nodes[p[1]].meta["tensor_meta"].dtype] if p[0] == "ptr" else "i32"
             for p in source.params] + ["constexpr" for _ in source.constexprs]
    start = time.perf_counter()
    src = ASTSource(fn, dict(zip(fn.arg_names, types)),
                    constexprs={name: 1024 for name in source.constexprs})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    return {"ptx": compiled.asm.get("ptx", ""), "cubin_bytes": len(compiled.asm.get("cubin", b"")),
            "seconds": time.perf_counter() - start}
