"""Programmatic dependent launch (``TPG_TRITON_PDL=1``): every generated kernel waits on the
previous grid before touching memory, launches with ``launch_pdl`` only then, and still builds
for Hopper. Runs without the interpreter (which has no grid dependency control)."""

import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if os.environ.get("TRITON_INTERPRET") == "1":
    pytest.skip("the compile check needs the real compiler (run without TRITON_INTERPRET)",
                allow_module_level=True)

from tensorplay_graph.backends.triton import codegen_common  # noqa: E402
from tensorplay_graph.backends.triton.compile_check import check_plan  # noqa: E402
from tensorplay_graph.backends.triton.launcher import SpecializedLaunch  # noqa: E402
from tensorplay_graph.backends.triton.lowering import plan_region  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "interp"))
from triton_regions import build, cases  # noqa: E402  (a test fixture, not shipped)

CASES = {name: (program, factory) for name, program, factory in cases()}


def _steps(name):
    program, factory = CASES[name]
    steps = plan_region(build(program, *factory("cpu", torch.float32)))
    assert steps
    for step in steps:
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride)
                 for n in step.inputs]
        yield step, metas


def _body(text):
    """The kernel's statements after its signature."""
    lines = text.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line == "):") + 1:]


@pytest.mark.parametrize("name", sorted(CASES)[:12])
def test_kernels_wait_first_and_build_for_hopper(name, monkeypatch):
    monkeypatch.setenv("TPG_TRITON_PDL", "1")
    for step, metas in _steps(name):
        text = step.plan.render(step.plan.layout_for(metas)).text
        assert codegen_common.PDL_IMPORT in text
        assert _body(text)[0].strip() == codegen_common.PDL_WAIT
        ptx = check_plan(step.plan, metas)["ptx"]
        assert "griddepcontrol.wait" in ptx
        # the wait comes before the kernel's first global memory access
        assert ptx.index("griddepcontrol.wait") < min(
            ptx.index(op) for op in ("ld.global", "st.global", "cp.async") if op in ptx)


def test_modes_and_the_interpreter(monkeypatch):
    monkeypatch.delenv("TPG_TRITON_PDL", raising=False)
    assert not codegen_common.pdl_enabled()
    monkeypatch.setenv("TPG_TRITON_PDL", "1")
    assert codegen_common.pdl_enabled()
    monkeypatch.setenv("TPG_TRITON_PDL", "auto")  # griddepcontrol needs a Hopper device
    assert codegen_common.pdl_enabled() is codegen_common._cuda_device_is_hopper_or_later()
    if not torch.cuda.is_available():
        assert not codegen_common.pdl_enabled()
    monkeypatch.setenv("TPG_TRITON_PDL", "1")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not codegen_common.pdl_enabled()


def test_launch_pdl_only_for_sources_that_wait(monkeypatch):
    monkeypatch.setenv("TPG_TRITON_PDL", "1")
    step, metas = next(_steps(sorted(CASES)[0]))
    source = step.plan.render(step.plan.layout_for(metas))
    layout = step.plan.layout_for(metas)
    waits = SpecializedLaunch(None, source, layout, (1,), {n: 1 for n in source.constexprs}, 4)
    assert waits.options["launch_pdl"] is True
    plain = source.__class__(source.name, source.text.replace(codegen_common.PDL_WAIT, "pass"),
                             source.params, source.constexprs)
    assert "launch_pdl" not in SpecializedLaunch(None, plain, layout, (1,),
                                                 {n: 1 for n in source.constexprs}, 4).options
