"""Regressions from issue 13's round 5 fuzz runs (seeds 700xxxxx, 2026-12-02).

The round ran on a new machine (AVX-512), where TensorPlay 1.0.0's float32 ``mul_`` with a
float32 tensor of the same shape leaves its target unchanged: programs writing ``v.mul_(w)``
or ``v *= w`` then "disagreed" with eager although the compiled product was right. The
generator now tries such a statement on copies and keeps it out when eager would not
multiply (tests/fuzz/FINDINGS.md, round 5). Seed 70003392 (torch): a tensor the program
made, read by a traced op and then written in untraced code, was a graph constant that the
write reached.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_graph as tpg

T = pytest.importorskip("tensorplay")

from fuzz_avoid import inplace_mul_ignored  # noqa: E402
from fuzz_check import check  # noqa: E402
from fuzz_gen import generate  # noqa: E402


def _t(values, dtype=np.float32):
    return T.from_numpy(np.asarray(values, dtype=dtype))


def _multiplies(a, b) -> bool:
    got = a.clone()
    got.mul_(b)
    return bool((np.asarray(got.numpy()) == np.asarray((a * b).numpy())).all())


@pytest.mark.parametrize("line", ["a.mul_(b)", "a *= b", "  a.mul_( b )"])
def test_the_detector_says_what_this_machines_mul_does(line):
    a, b = _t([1.0, 2.0, -3.0]), _t([2.0, 2.0, 0.5])
    ns = {"T": T, "a": a, "b": b}
    assert inplace_mul_ignored(T, line, ns) == (not _multiplies(a, b))
    assert a.numpy().tolist() == [1.0, 2.0, -3.0]  # tried on a copy


def test_the_detector_reads_tensors_that_require_grad():
    # seed 70000190: the generator's values may require grad (numpy() refuses them)
    a, b = _t([1.0, 2.0]), _t([2.0, 2.0])
    a.requires_grad_(True)
    ns = {"T": T, "a": a * 1.0, "b": b}
    assert inplace_mul_ignored(T, "a.mul_(b)", ns) == (not _multiplies(a.detach(), b))


def test_the_detector_leaves_other_statements_alone():
    a, b = _t([1.0, 2.0]), _t([2.0])
    ns = {"T": T, "a": a, "b": b}
    assert not inplace_mul_ignored(T, "a.mul_(b)", ns)  # a broadcast operand is multiplied
    assert not inplace_mul_ignored(T, "a.mul_(2.0)", ns)  # a number: no tensor operand
    assert not inplace_mul_ignored(T, "a.add_(b)", ns)
    assert not inplace_mul_ignored(T, "c = a * b", ns)


@pytest.mark.parametrize("seed", [70001130, 70001292, 70001445, 70001490, 70002556, 70000190,
                                  70009808])
def test_round5_tensorplay_programs_match_eager(seed):
    outcome = check(generate(seed, "tensorplay"), "reference")
    assert outcome.status == "ok", outcome


def _made_then_written(M):
    def program(x):
        v = M.arange(8, dtype=M.float32)
        y = x @ v           # traced: v becomes a graph constant
        v[0] = -3.0         # untraced: only v itself changes
        return y, x * v     # the second use reads the written v
    return program


@pytest.mark.parametrize("backend", ["reference", "interpreter", "auto"])
@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_a_made_tensor_written_after_a_traced_read_keeps_each_reads_value(framework, backend):
    M = pytest.importorskip(framework)
    x = M.from_numpy(np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32))
    program = _made_then_written(M)
    want = program(x)
    got = tpg.compile(program, backend=backend)(x)
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g.numpy()), np.asarray(w.numpy()), rtol=1e-6)


class _Holder:
    pass


def test_a_tensor_not_written_during_capture_is_read_live_not_copied():
    # The copy taken when a tensor is lifted is kept only if the trace wrote the tensor:
    # a tensor on a plain object, scaled in place between calls, is read as it is now.
    torch = pytest.importorskip("torch")
    holder = _Holder()
    holder.scale = torch.ones(3)

    def program(x):
        return x * holder.scale

    compiled = tpg.compile(program, backend="reference")
    x = torch.ones(3)
    assert torch.equal(compiled(x), program(x))
    holder.scale.mul_(2)
    assert torch.equal(compiled(x), program(x))


def test_equal_inputs_with_unequal_eager_results_are_kept_out():
    # Seed 70014006: TensorPlay's gelu of a constant (45,) tensor is not constant on the
    # AVX-512 machine (vector lanes and scalar tail round differently); argmax then picked a
    # tail element. The detector says what this machine's TensorPlay does.
    from fuzz_avoid import equal_inputs_unequal_outputs
    F = pytest.importorskip("tensorplay.nn.functional")
    x = _t(np.full((5, 3, 3), -1.5))
    y = F.gelu(x)
    uneven = len(np.unique(np.asarray(y.numpy()))) > 1
    assert equal_inputs_unequal_outputs(T, "F.gelu(x)", {"x": x}, y) == uneven
    assert not equal_inputs_unequal_outputs(T, "T.sum(x)", {"x": x}, T.sum(x))
    outcome = check(generate(70014006, "tensorplay"), "reference")
    assert outcome.status == "ok", outcome


@pytest.mark.parametrize("framework", ["torch", "tensorplay"])
def test_sigmoid_and_silu_underflow_where_eagers_float32_exp_overflows(framework):
    # Seed 73001389: log(sigmoid(nan_to_num(-inf, neginf=-100))) is -inf in eager (float32
    # exp(100) overflows, so sigmoid is 0.0), -99.98 from a float64 sigmoid.
    M = pytest.importorskip(framework)
    v = np.array([-100.0, -88.72283935546875, -88.72283172607422, -88.0, 1.0, np.nan, -np.inf],
                 np.float32)
    for program in (lambda x: M.log(x.sigmoid()), lambda x: M.nn.functional.silu(x) * 1e30):
        want = np.asarray(program(M.from_numpy(v.copy())).numpy())
        got = np.asarray(tpg.compile(program, backend="reference")(M.from_numpy(v.copy())).numpy())
        np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_an_inplace_form_that_disagrees_with_its_own_out_of_place_form_is_kept_out():
    # Seed 73000648: int32 clamp_(max=nan) keeps the values, clamp(max=nan) gives INT_MIN.
    from fuzz_avoid import inplace_disagrees
    a = _t([5, -3, 0], np.int32)
    ns = {"T": T, "a": a}
    out = a.clamp(max=float("nan")).numpy().tolist()
    inplace = a.clone()
    inplace.clamp_(max=float("nan"))
    assert inplace_disagrees(T, 'a.clamp_(max=float("nan"))', ns) == \
        (out != inplace.numpy().tolist())
    assert a.numpy().tolist() == [5, -3, 0]  # tried on a copy
    assert not inplace_disagrees(T, "a.clamp_(max=2.5)", ns)  # both forms give [2, -3, 0]
    assert not inplace_disagrees(T, "a.add_(1)", ns)
    outcome = check(generate(73000648, "tensorplay"), "reference")
    assert outcome.status == "ok", outcome
