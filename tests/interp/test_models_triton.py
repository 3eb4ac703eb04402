"""Zoo models with backend "triton", kernels run in Triton's interpreter (TRITON_INTERPRET=1).

The models and the eager comparison are tests/models/zoo.py and harness.py; here each entry
point runs with ``options={"backends": ["triton"]}`` on tiny configs, in no_grad mode; one
training step (grad mode) runs our compiled forward / backward pair.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the models package

from models.harness import check  # noqa: E402
from models.upstream import marks  # noqa: E402
from models.zoo import BY_NAME  # noqa: E402

from triton_regions import lowered_summary  # noqa: E402

CELLS = [("tp_mlp", "tpg"), ("tp_mlp", "tp"), ("tp_transformer_block", "tpg"),
         ("tp_transformer_block", "tp"), ("tp_mlp_custom_op", "tpg"), ("gpt2", "dynamo")]


@pytest.mark.parametrize("model, entry", [
    pytest.param(m, e, id=f"{m}-{e}", marks=marks(m, e, "no_grad", "triton")) for m, e in CELLS])
def test_triton_equals_eager(model, entry):
    result = check(BY_NAME[model], entry, "no_grad", "triton")
    if entry == "tpg":  # the lowered graph is inspectable: Triton kernels really ran
        assert lowered_summary(result.compiled)["kernels"], "no Triton kernel in the lowered graph"


def test_triton_training_step_equals_eager():
    """Grad mode through our own joint graph: forward and backward both launch Triton kernels."""
    result = check(BY_NAME["tp_mlp_custom_op"], "tpg", "grad", "triton")
    (spec,) = result.compiled.specializations.values()
    program = spec.runner.training.report
    # TensorPlay tensors out of interpreted Triton kernels report device "cpu:0" (captured:
    # "cpu"), so the backward's first call re-learns its metadata; the second is lowered.
    model, args, _ = BY_NAME["tp_mlp_custom_op"].build()
    result.compiled(*args).sum().backward()
    assert program.eager_reason is None, program.explain()
    for half in ("forward", "backward"):
        assert any(r.backend == "triton" for r in program.regions(half)), program.explain()
