"""Every generated kernel of the shared case table compiles for Hopper (sm_90) on this CPU machine.

Runs WITHOUT the interpreter: triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32)).
"""

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
        assert "ld.global" in result["ptx"] and "st.global" in result["ptx"]
