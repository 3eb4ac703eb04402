"""The wide generator: deterministic, and every extra family and return form shows up."""

from __future__ import annotations

import pytest

from fuzz_gen import generate
from fuzz_program import build_function

NEEDLES = ["long()", ".double()", "cumsum", "argmax", "topk", "sort", "gather", "index_select",
           "masked_fill", "T.clamp(", "tril", "roll", "F.pad", "repeat", "T.stack", "T.cat",
           "split", "chunk", "unbind", "einsum", "zeros_like", "T.arange", "T.full", "//", "%",
           "T.isinf", "T.fmax", "T.logical_", "var(", "logsumexp", "dtype=T.float32",
           "training=False", "F.relu6", "approximate='tanh'", "F.conv1d", "fuzz_mod(",
           "if ", "for ", "+=", "[0].add_(", "isfinite", "F.elu", "T.where("]


def test_wide_generator_is_deterministic_and_covers_its_families():
    programs = [generate(seed, "torch") for seed in range(120)]
    assert [p.body() for p in programs[:6]] == [generate(s, "torch").body() for s in range(6)]
    text = "\n".join(p.body() for p in programs)
    missing = [n for n in NEEDLES if n not in text]
    assert not missing, f"no wide program uses {missing}"
    forms = {p.meta.get("ret", "tuple") for p in programs}
    assert forms == {"tuple", "list", "dict", "bare"}
    assert "return {" in text and "return [" in text
    assert any(i.dtype in ("int64", "float64") for p in programs for i in p.inputs)


def test_wide_programs_run_eagerly_with_unique_input_names():
    for framework in ("torch", "tensorplay"):
        pytest.importorskip(framework)
        for seed in range(40):
            program = generate(seed, framework)
            names = [i.name for i in program.inputs]
            assert len(names) == len(set(names)), (seed, names)
            fn, inputs = build_function(program)
            fn(*inputs())
