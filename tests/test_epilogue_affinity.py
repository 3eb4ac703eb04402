"""One planner across backends: a GEMM's epilogue joins the GEMM's backend (backend "auto" puts
Triton first for pointwise work; the bias / activation / residual after a TileLang GEMM would
otherwise be a second kernel and a second pass over the GEMM's output). Only where the GEMM may
run as a TileLang kernel: ``gemm="tilelang"`` here; tests/test_gemm_choice.py covers the rest."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.tilelang import TileLangBackend  # noqa: E402
from tensorplay_graph.passes.partition import regions_from_meta  # noqa: E402
from tensorplay_graph.passes.pipeline import plan_graph  # noqa: E402

BF = torch.bfloat16


class PointwiseFirst:
    """Stands in for Triton on this CPU machine: claims every pointwise node, no matmul."""

    name = "pointwise_first"

    def supports(self, node):
        prim = node.meta.get("prim")
        return None if prim is not None and prim.kind == "pointwise" else "pointwise only"

    def compile(self, region):  # planning only
        raise NotImplementedError


def regions(fn, *args):
    gm, _ = plan_graph(tpg.capture(fn, *args), args,
                       backends=[PointwiseFirst(), TileLangBackend(device="cuda", gemm="tilelang")])
    return [(r.backend, r.names) for r in regions_from_meta(gm)], gm


def test_bias_activation_and_residual_join_the_gemm():
    a, b, bias, res = (torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF),
                       torch.randn(128, dtype=BF), torch.randn(128, 128, dtype=BF))
    found, gm = regions(lambda a, b, bias, res: F.gelu(a @ b + bias) + res, a, b, bias, res)
    assert found == [("tilelang", ["matmul", "add", "gelu", "add_1"])]
    gelu = next(n for n in gm.graph.nodes if n.name == "gelu")
    assert gelu.meta["epilogue_of"] == "matmul"
    assert "epilogue" in gelu.meta["declined"]["pointwise_first"]
    (region,) = regions_from_meta(gm)
    (desc, operands), = TileLangBackend(device="cuda").gemm_descs(region)  # one GEMM kernel
    assert [s.name for s in desc.ep_steps] == ["matmul", "add", "gelu", "add_1"]
    assert [e.kind for e in desc.ep_inputs] == ["col", "full"]


def test_a_gemm_output_read_twice_keeps_its_readers_on_the_pointwise_backend():
    a, b = torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF)
    found, _ = regions(lambda a, b: (lambda h: h.sigmoid() * h)(a @ b), a, b)
    assert ("tilelang", ["matmul"]) in found
    assert ("pointwise_first", ["sigmoid", "mul"]) in found


def test_pointwise_work_before_the_gemm_stays_put():
    a, b = torch.randn(128, 256, dtype=BF), torch.randn(256, 128, dtype=BF)
    found, _ = regions(lambda a, b: (a * 2).relu() @ b, a, b)
    assert found == [("pointwise_first", ["mul", "relu"]), ("tilelang", ["matmul"])]
