"""A new reduction prim and a new pointwise prim, added as records only (tests/extension_prims.py),
are planned, generated and compiled by the backends; a missing or declined lowering is said,
never silently ignored. Running the Triton kernels: tests/interp/test_prim_extension_interp.py."""

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from extension_prims import NAMES, make_prod, make_square, program, registered  # noqa: E402
from tensorplay_graph import prims  # noqa: E402
from tensorplay_graph.errors import UnsupportedOpError  # noqa: E402
from tensorplay_graph.prims.lowering import Reduction  # noqa: E402


def test_the_prims_are_new():
    for name in NAMES:
        with pytest.raises(UnsupportedOpError, match="no prim named"):
            prims.get(name)


def test_triton_plans_and_generates_the_new_prims():
    x = torch.rand(16, 64)
    with registered():
        plan = tpg.explain(program, x, backend="triton")
    assert [r.nodes for r in plan.regions] == [["mul", "add", "prod", "square"]]
    assert plan.regions[0].backend == "triton" and not plan.eager
    source = plan.kernels[0].source
    # One rows kernel: the product is a tl.reduce with the multiply combine function (rows
    # of 64 fill their block: no mask).
    assert ", 0, _tpg_mul)" in source and "def _tpg_mul(a, b):" in source
    assert "mask" not in source
    assert "# prod" in source and "# square" in source


def test_generated_kernel_compiles_for_hopper():
    pytest.importorskip("triton")
    from tensorplay_graph.backends.triton.compile_check import check_plan
    from tensorplay_graph.backends.triton.lowering import plan_region
    from tensorplay_graph.passes.partition import regions_from_meta

    x = torch.rand(16, 64)
    with registered():
        plan = tpg.explain(program, x, backend="triton", compile_kernels=False)
        (region,) = regions_from_meta(plan.graph_module)
        (step,) = plan_region(region)
        metas = [(tuple(n.meta["tensor_meta"].shape), n.meta["tensor_meta"].stride)
                 for n in step.inputs]
        result = check_plan(step.plan, metas)
    assert result["cubin_bytes"] > 0 and ".target sm_90" in result["ptx"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_reference_backend_runs_the_new_prims_like_eager(dtype):
    x = torch.rand(16, 8) if dtype.is_floating_point else torch.randint(-3, 4, (16, 8), dtype=dtype)
    fn = program if dtype.is_floating_point else (lambda t: (t + 1).prod(dim=1).square())
    with registered():
        compiled = tpg.compile(fn, backend="reference")
        got, want = compiled(x), fn(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)


def test_a_reduction_without_a_triton_rule_is_declined_with_the_reason():
    with registered(make_prod(triton=None), make_square()):
        plan = tpg.explain(program, torch.rand(16, 64), backend="triton")
    why = plan.declined["prod"]["triton"]
    assert "no 'triton' lowering in its record" in why
    assert "prod" in plan.barriers and "prod" in str(plan)


def test_a_records_declines_check_is_the_backends_reason():
    def no_integers(args, out, framework):
        return "integer squares wrap differently" if out.dtype.startswith("int") else None

    with registered(make_prod(), make_square(declines={"triton": no_integers})):
        ints = tpg.explain(lambda t: t.square(), torch.ones(4, 4, dtype=torch.int32),
                           backend="triton")
        floats = tpg.explain(lambda t: t.square(), torch.ones(4, 4), backend="triton")
    assert ints.declined["square"]["triton"] == "integer squares wrap differently"
    assert [r.nodes for r in floats.regions] == [["square"]]


def test_reduction_rules_name_their_combine_ops():
    assert Reduction("prod").identity == 1.0 and Reduction("max").identity == float("-inf")
    with pytest.raises(ValueError, match="combine must be one of .*row builder"):
        Reduction("logsumexp")


def _is_prim_name(expr) -> bool:
    """``prim.name`` / ``node.meta["prim"].name`` (any spelling of a prim's name)."""
    import ast
    if not (isinstance(expr, ast.Attribute) and expr.attr == "name"):
        return False
    value = expr.value
    if isinstance(value, ast.Name):
        return "prim" in value.id
    return isinstance(value, ast.Subscript) and getattr(value.slice, "value", None) == "prim"


def test_no_backend_branches_on_a_prims_name():
    import ast
    import pathlib

    import tensorplay_graph.backends as backends

    found = []
    for path in pathlib.Path(backends.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    _is_prim_name(e) for e in [node.left, *node.comparators]):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"backends compare prim names (read the record instead): {found}"
