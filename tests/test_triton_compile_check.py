"""Every generated kernel of the shared case table compiles for Hopper (sm_90) on this CPU machine.

Runs WITHOUT the interpreter: triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32)).
"""

import operator
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("the compile check needs the real compiler (run without TRITON_INTERPRET)",
                allow_module_level=True)

from tensorplay_graph.backends.triton.compile_check import check_plan  # noqa: E402
from tensorplay_graph.backends.triton.lowering import plan_region  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "interp"))
from triton_regions import build, cases  # noqa: E402  (a test fixture, not shipped)

CASES = {name: (program, factory) for name, program, factory in cases()}


@pytest.mark.parametrize("name", list(CASES))
def test_generated_kernels_compile_for_hopper(name):
    program, factory = CASES[name]
    dtype = torch.bfloat16 if name in ("softmax", "ln_gelu", "chain") else torch.float32
    steps = plan_region(build(program, *factory("cpu", dtype)))
    assert steps
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride) for n in step.inputs]
        result = check_plan(step.plan, metas)
        assert result["cubin_bytes"] > 0
        assert ".target sm_90" in result["ptx"]
        # global loads: direct, or through shared memory in a pipelined column loop
        ptx = result["ptx"]
        assert ("ld.global" in ptx or "cp.async" in ptx) and "st.global" in ptx


def test_tiled_channels_last_kernel_compiles_for_hopper():
    """A ResNet epilogue in NHWC (batch norm + residual add + relu, bf16): the tiled kernel."""
    from tensorplay_graph.prims.nn import batch_norm_channels

    def epilogue(b, x, r, mean, var, w, bias):
        y = b.call(batch_norm_channels, x, mean, var, w, bias, 1e-5)
        return b.call(torch.relu, b.call(torch.add, y, r))

    nhwc = [torch.randn(4, 64, 8, 8).to(torch.bfloat16).contiguous(
        memory_format=torch.channels_last) for _ in range(2)]
    channels = [torch.rand(64, 1, 1).to(torch.bfloat16) + 0.5 for _ in range(4)]
    (step,) = plan_region(build(epilogue, *nhwc, *channels))
    metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride) for n in step.inputs]
    assert "BLOCK_C" in step.plan.render(step.plan.layout_for(metas)).text
    result = check_plan(step.plan, metas)
    assert result["cubin_bytes"] > 0 and ".target sm_90" in result["ptx"]


def test_indexed_rotary_kernel_compiles_for_hopper():
    """The rotary block (views, neg, cat, mul, add) as one indexed kernel builds for sm_90."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import tensorplay_graph as tpg
    from tensorplay_graph.backends.triton.cache import default_cache

    def rotary(q, cos, sin):
        h = q.shape[-1] // 2
        return q * cos + torch.cat((-q[..., h:], q[..., :h]), -1) * sin

    bf16 = torch.bfloat16
    q = torch.randn(2, 8, 4, 64, dtype=bf16).transpose(1, 2)
    cos, sin = torch.randn(1, 1, 8, 64, dtype=bf16), torch.randn(1, 1, 8, 64, dtype=bf16)
    plan = tpg.explain(rotary, q, cos, sin, backend="triton")
    assert len(plan.regions) == 1
    source = plan.kernels[plan.regions[0].id].source
    assert "tl.where" in source
    name = source.split("def ", 1)[1].split("(", 1)[0]
    fn = default_cache().jit_function(name, source)
    args = list(fn.arg_names)   # q, cos, sin, out pointers; then strides; BLOCK_SIZE last
    signature = {a: "*bf16" if i < 4 else "constexpr" if i == len(args) - 1 else "i32"
                 for i, a in enumerate(args)}
    compiled = triton.compile(ASTSource(fn, signature, constexprs={args[-1]: 1024}),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert ".entry" in compiled.asm["ptx"]


def test_indexed_kernel_with_a_0d_operand_compiles_for_hopper():
    """A 0-d operand (the loss gradient in a cross-entropy backward) has offset 0 in an indexed
    kernel: a scalar pointer, which Triton cannot load under a block mask (H200 training run)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import tensorplay_graph as tpg
    from tensorplay_graph.backends.triton.cache import default_cache

    def scaled_cat(q, s):
        return torch.cat((q, -q), -1) * s

    q, s = torch.randn(4, 8, 32), torch.tensor(0.5)
    plan = tpg.explain(scaled_cat, q, s, backend="triton")
    assert len(plan.regions) == 1
    source = plan.kernels[plan.regions[0].id].source
    name = source.split("def ", 1)[1].split("(", 1)[0]
    fn = default_cache().jit_function(name, source)
    args = list(fn.arg_names)  # q, s, out pointers; then q's strides; BLOCK_SIZE last
    signature = {a: "*fp32" if i < 3 else "constexpr" if i == len(args) - 1 else "i32"
                 for i, a in enumerate(args)}
    compiled = triton.compile(ASTSource(fn, signature, constexprs={args[-1]: 1024}),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert ".entry" in compiled.asm["ptx"]


def test_pow_with_python_number_exponents_compiles_for_hopper():
    # The exponent's integrality is decided at generation (`tl.where(True, ...)`); inf / nan
    # exponents arrive as literal text. Found by the Triton interpreter fuzz run (6000000+).
    def program(b, x):
        return tuple(b.call(torch.pow, x, e) for e in (-3.0, 1.5, 7, float("inf"), float("nan")))

    steps = plan_region(build(program, torch.randn(4, 8)))
    assert steps
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride) for n in step.inputs]
        assert check_plan(step.plan, metas)["cubin_bytes"] > 0


def test_gpu_spellings_of_special_values_compile_for_hopper():
    # -0.0 from its bits, neg as x * -1.0, relu(-0.0) = 0.0, pow through libdevice
    # (tests/interp/test_triton_gpu_spellings.py runs them; they are the GPU's here)
    def program(b, x):
        return (b.call(operator.truediv, x, -0.0), b.call(torch.where, b.call(operator.gt, x, 0.0),
                                                          -0.0, x),
                b.call(operator.neg, x), b.call(torch.relu, x), b.call(torch.pow, x, x))

    steps = plan_region(build(program, torch.randn(4, 8)))
    assert steps
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride) for n in step.inputs]
        result = check_plan(step.plan, metas)
        assert result["cubin_bytes"] > 0
        assert "0f80000000" in result["ptx"].lower() or "-0f" in result["ptx"].lower() \
            or "0x80000000" in result["ptx"].lower(), "no -0.0 constant in the PTX"


def test_strict_fuzz_kernels_compile_for_hopper():
    # Strict-lowering fuzz findings (6000000+): a constant-index view broadcast (one scalar
    # load, no block mask), an all-empty cat (a zeros block), a column amin / amax of a
    # value named `where` (its NaN epilogue).
    def indexed(b, x, f, e):
        pick = b.call(torch.where, x, f, b.call(operator.getitem, f, (slice(1, None),)))
        empty = b.call(torch.cat, [b.call(operator.getitem, e, (slice(1, None),))] * 2, 0)
        return pick, b.call(torch.mul, empty, 2.0)

    def columns(b, w):
        v = b.call(torch.where, b.call(torch.gt, w, 0), w, 0.0)
        return b.call(torch.amin, v, -2), b.call(torch.amax, v, -2)

    regions = [build(indexed, torch.tensor([True, False]), torch.randn(2), torch.randn(1, 5)),
               build(columns, torch.randn(3, 64, 2))]
    kinds = set()
    for region in regions:
        for step in plan_region(region):
            kinds.add(type(step.plan).__name__)
            metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride)
                     for n in step.inputs]
            assert check_plan(step.plan, metas)["cubin_bytes"] > 0
    assert kinds == {"IndexedPlan", "KernelPlan"}


def test_pow_with_tensor_and_per_row_exponents_compiles_for_hopper():
    # Fuzz seeds 40001155 (`x ** x.amax(...)`: base / exponent tests combined by tl.where,
    # no `|`) and 40000579 (`70000.0 ** fp16_x`: the scalar base cast to float16, inf).
    def program(b, x):
        m = b.call(torch.amax, x, -1, True)
        return b.call(operator.pow, x, m), b.call(operator.pow, 70000.0, x)

    steps = plan_region(build(program, torch.randn(4, 8).half()))
    assert steps
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride) for n in step.inputs]
        assert check_plan(step.plan, metas)["cubin_bytes"] > 0


def test_row_copy_kernel_compiles_for_hopper():
    """The padded GEMMs' row copies (``backends/row_copy.py``): GPT-2's logits out of rows
    padded to 50264 into rows of 50257."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from tensorplay_graph.backends.row_copy import BLOCK, FLAT_BLOCK, _kernel
    rows_fn, flat_fn = _kernel()
    signature = {"src": "*bf16", "dst": "*bf16", "n_cols": "i32", "src_stride": "constexpr",
                 "dst_stride": "constexpr", "BLOCK": "constexpr"}
    constexprs = {"src_stride": 50264, "dst_stride": 50257, "BLOCK": BLOCK}
    compiled = triton.compile(ASTSource(rows_fn, signature, constexprs=constexprs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ptx = compiled.asm["ptx"]
    assert ".target sm_90" in ptx and "ld.global" in ptx and "st.global" in ptx
    # The flat kernel, for GPT-2's 4096 x 50257 (a total divisible by 16, as Triton's launch
    # specializes it): its stores vectorized (16-byte v4.b32).
    for wide in (False, True):
        signature = {"src": "*bf16", "dst": "*bf16", "total": "i32", "WIDTH": "constexpr",
                     "PITCH": "constexpr", "WIDE": "constexpr", "BLOCK": "constexpr"}
        constexprs = {"WIDTH": 50257, "PITCH": 50264, "WIDE": wide, "BLOCK": FLAT_BLOCK}
        compiled = triton.compile(
            ASTSource(flat_fn, signature, constexprs=constexprs,
                      attrs={(i,): [["tt.divisibility", 16]] for i in range(3)}),
            target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
        assert "st.global.v4.b32" in compiled.asm["ptx"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_gpu_division_and_integer_casts_compile_for_hopper(dtype):
    # correctly rounded division (libdevice.div_rn, fp32 and fp64; integers divide as float32)
    # and a NaN cast to int32 / int64 written out as CUDA eager's value
    def program(b, x):
        q = b.call(operator.truediv, x, 3)
        return (q, b.call(torch.div, x, 2.5, rounding_mode="floor"),
                b.call(torch.div, x, -0.0, rounding_mode="trunc"),
                b.call(operator.truediv, x, x), b.call(torch.pow, q, 4), b.call(torch.pow, 2, q),
                b.call(torch.pow, q, q))

    x = torch.arange(1, 33).reshape(4, 8).to(dtype)
    steps = plan_region(build(program, x))
    assert steps
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride) for n in step.inputs]
        result = check_plan(step.plan, metas)
        assert result["cubin_bytes"] > 0
        assert "div.rn.f" in result["ptx"], "division is not correctly rounded"
