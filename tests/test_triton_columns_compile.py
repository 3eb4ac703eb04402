"""The column-reduction kernels (one program per column block, or split with the last
program combining) and the cross-entropy row kernel compile for Hopper (sm_90) on this CPU
machine -- the real compiler, not the interpreter."""

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
from tensorplay_graph.prims.losses import cross_entropy_rows  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "interp"))
from triton_regions import build  # noqa: E402  (a test fixture, not shipped)


def _check(program, *examples):
    steps = plan_region(build(program, *examples))
    results = []
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride)
                 for n in step.inputs]
        result = check_plan(step.plan, metas)
        # global loads: direct, or through shared memory where the loop is pipelined
        assert result["cubin_bytes"] > 0 and ("ld.global" in result["ptx"]
                                              or "cp.async" in result["ptx"])
        results.append(result)
    return results


def _split(result) -> bool:
    """Whether the kernel takes tickets: an acquire-release atomic add at GPU scope."""
    return "atom.global.gpu.acq_rel.add" in result["ptx"].replace(".u32", "").replace(".s32", "")


def test_split_column_sum_with_epilogue_compiles():
    x, b = torch.empty(4096, 64, dtype=torch.bfloat16), torch.empty(64, dtype=torch.bfloat16)
    (result,) = _check(lambda g, x, b: g.call(torch.add, g.call(torch.sum, x, dim=0), b), x, b)
    assert _split(result) and "bar.sync" in result["ptx"]


def test_the_loop_over_the_row_is_pipelined():
    """Loads in flight through shared memory (cp.async). Here float32: without the pointer
    alignment Triton's JIT specializes on, 2-byte elements could not use 4-byte copies."""
    x = torch.empty(4096, 64)
    (result,) = _check(lambda g, x: g.call(torch.sum, x, dim=0), x)
    assert "cp.async" in result["ptx"]


def test_one_stage_middle_dim_amax_compiles():
    x = torch.empty(8, 16, 512)
    (result,) = _check(lambda g, x: g.call(torch.amax, x, dim=1), x)
    assert not _split(result)


def test_cross_entropy_rows_compiles():
    logits, target = torch.empty(64, 32000, dtype=torch.bfloat16), torch.zeros(64, dtype=torch.long)
    (result,) = _check(lambda g, x, t: g.call(cross_entropy_rows, g.call(torch.Tensor.float, x), t),
                       logits, target)
    assert "ex2" in result["ptx"]  # tl.exp


def test_whole_tensor_sum_and_multi_pass_softmax_compile():
    """One long contiguous row (a 1-wide tile, split) and a three-loop softmax over dim 0."""
    (whole,) = _check(lambda g, x: g.call(torch.sum, x), torch.empty(300000))
    assert _split(whole)
    (soft,) = _check(lambda g, x: g.call(torch.softmax, x, dim=0), torch.empty(512, 64))
    assert not _split(soft)
