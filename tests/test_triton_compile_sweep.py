"""Every Triton kernel of a few zoo models' GPU plans compiles for Hopper (sm_90), on this CPU.

The bounded version of ``benchmarks/compile_sweep_hopper.py`` (which sweeps the whole zoo and
the GPU benchmark configs): a training step of the zoo's GPT-2 in bf16 (forward and backward
graphs of our joint graph: cross-entropy, layer-norm and bias-gradient column kernels, the
loss-gradient indexed kernel) and Llama inference at an odd sequence length (what a dynamic
call specializes to). Runs WITHOUT the interpreter: real ``triton.compile`` for
``GPUTarget("cuda", 90, 32)``.
"""

import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
pytest.importorskip("transformers")
if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    pytest.skip("the compile sweep needs the real compiler (run without TRITON_INTERPRET)",
                allow_module_level=True)

from tensorplay_graph.backends.triton import codegen_indexed  # noqa: E402
from tensorplay_graph.backends.triton.compile_sweep import HopperSweep, training_halves  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from models.zoo import BY_NAME  # noqa: E402


def _gpt2_training_halves():
    model, (ids,), _ = BY_NAME["gpt2"].build()
    model = model.to(torch.bfloat16)
    return training_halves(lambda ids: model(ids, labels=ids).loss, ids)


def _sweep(halves):
    sweep = HopperSweep()
    for kind, gm, inputs in halves:
        sweep.check(gm, *inputs, name=f"gpt2 {kind}")
    return sweep


def test_gpt2_training_step_kernels_compile_for_hopper():
    sweep = _sweep(_gpt2_training_halves())
    assert not sweep.lowering_errors, sweep.lowering_errors
    assert not sweep.failures, [(r.kernel, r.where, r.error) for r in sweep.failures]
    assert sweep.regions >= 20 and len(sweep.records) >= 10, (sweep.regions, len(sweep.records))
    # every kind of generated kernel is among them: pointwise, rows, indexed (views / cat,
    # the loss gradient) and column kernels (the bias gradients: sums over leading dims)
    names = " ".join(r.kernel for r in sweep.records)
    for kind in ("tpg_pointwise", "tpg_rows", "tpg_indexed"):
        assert kind in names, names
    assert any("BLOCK_K" in r.signature for r in sweep.records), names


def test_llama_inference_at_an_odd_length_compiles_for_hopper():
    model, _, _ = BY_NAME["llama"].build()
    ids = torch.randint(0, 100, (1, 7), generator=torch.Generator().manual_seed(0))
    sweep = HopperSweep()
    with torch.no_grad():
        sweep.check(model.to(torch.bfloat16), ids, name="llama")
    assert sweep.regions >= 5 and not sweep.lowering_errors
    assert not sweep.failures, [(r.kernel, r.where, r.error) for r in sweep.failures]


def test_the_sweep_reports_the_h200_masked_scalar_load(monkeypatch):
    """The compile error the H200 found in GPT-2 training (a 0-d operand loaded under a block
    mask; the interpreter accepts it) is reported, with the region that launched it."""
    operand = codegen_indexed.operand_expr
    monkeypatch.setattr(codegen_indexed, "operand_expr",
                        lambda arg, offset, mask: operand(arg, offset, mask or "mask"))
    halves = [h for h in _gpt2_training_halves() if h[0] == "backward"]
    sweep = _sweep(halves)
    assert sweep.failures, "a masked load through a scalar pointer must fail Triton's compile"
    failure = sweep.failures[0]
    assert "gpt2 backward: region" in failure.where
    assert "block type" in failure.error or "mask" in failure.error.lower(), failure.error


def test_the_sweep_reports_kernels_needing_more_shared_memory_than_hopper_has(monkeypatch):
    """More shared memory than a block may use fails only at launch on the GPU: the sweep
    reports it from the compiled kernel's metadata (here with the limit lowered so the
    pipelined loop of a column sum exceeds it)."""
    from tensorplay_graph.backends.triton import compile_sweep
    x = torch.randn(4096, 256)
    sweep = HopperSweep()
    sweep.check(lambda t: t.sum(0), x, name="column sum")
    assert sweep.records and not sweep.failures
    monkeypatch.setattr(compile_sweep, "HOPPER_SHARED", 1024)
    sweep = HopperSweep()
    sweep.check(lambda t: t.sum(0) * 2, x, name="column sum")
    assert sweep.failures and "bytes of shared memory per block" in sweep.failures[0].error
