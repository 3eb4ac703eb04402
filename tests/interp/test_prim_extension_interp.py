"""The new prims of tests/extension_prims.py run as generated Triton kernels (TRITON_INTERPRET=1),
equal to eager, and the README's backend-author examples run on Triton too."""

import operator
import os
import sys

import pytest

torch = pytest.importorskip("torch")
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before Python starts (scripts/test.sh)", allow_module_level=True)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
import tensorplay_graph as tpg  # noqa: E402
from extension_prims import program, registered  # noqa: E402
from test_readme import BLOCKS, run_block  # noqa: E402


def _kernel_backends(compiled):
    """Backends of the kernels the one specialization of ``compiled`` runs, and its other calls
    (unpacking a kernel's outputs aside)."""
    (spec,) = compiled.specializations.values()
    nodes = [n for n in spec.lowered.graph.nodes if n.op in ("call_function", "call_method")
             and n.target is not operator.getitem]
    return [n.meta["kernel"].backend if "kernel" in n.meta else n.name for n in nodes]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32])
def test_new_prims_run_as_one_triton_kernel(dtype):
    if dtype.is_floating_point:
        x, fn = torch.rand(33, 64).to(dtype), program
    else:  # products of ints accumulate (and wrap) in int64, like eager
        x, fn = torch.randint(-3, 4, (33, 12), dtype=dtype), (lambda t: (t + 1).prod(dim=1).square())
    with registered():
        compiled = tpg.compile(fn, backend="triton")
        got, want = compiled(x), fn(x)
        assert _kernel_backends(compiled) == ["triton"]
    assert got.dtype == want.dtype
    tol = {torch.float16: 2e-3, torch.float32: 1e-5}.get(dtype, 0)
    torch.testing.assert_close(got, want, rtol=tol, atol=0)


_CHECK = """
(_spec,) = compiled.specializations.values()
_backends = {n.meta["kernel"].backend for n in _spec.lowered.graph.nodes if "kernel" in n.meta}
assert _backends == {"triton"}, _backends
"""


@pytest.mark.parametrize("index", [i for i, b in enumerate(BLOCKS) if "register(Prim(" in b])
def test_readme_prim_examples_run_on_triton(index, tmp_path):
    result = run_block(BLOCKS[index] + _CHECK, tmp_path, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
