"""The Triton spellings a GPU compile gets, run in the interpreter against CUDA eager's values.

Triton 3.6 compiling for the H200 loses the sign of a -0.0 constant and of ``-x`` at +0.0, and
folds a cast of a NaN known at compile time to garbage; CUDA eager's relu gives 0.0 for -0.0
where CPU eager keeps -0.0 (all measured by ``benchmarks/triton_special_values_gpu.py``; GPU
fuzz seeds 101010355, 101010370, 101030174, 101040096, 101050480). The GPU spellings are
chosen when Triton is not interpreting; here they are forced, and the interpreter (exact IEEE
arithmetic) checks that they compute CUDA eager's values. On the GPU itself:
``benchmarks/fuzz_gpu.sh``.
"""

from __future__ import annotations

import io
import math
import tokenize

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg  # noqa: E402
from tensorplay_graph.backends.triton import cache as triton_cache  # noqa: E402
from tensorplay_graph.prims import pointwise_lowerings  # noqa: E402

pytestmark = pytest.mark.usefixtures("strict")


@pytest.fixture
def gpu_spellings(monkeypatch):
    monkeypatch.setattr(pointwise_lowerings, "gpu_triton", lambda: True)


def _bits(t):
    return [(math.copysign(1.0, v), v) if not math.isnan(v) else "nan" for v in t.tolist()]


def test_relu_of_negative_zero_is_positive_zero_as_in_cuda_eager(gpu_spellings):
    x = torch.tensor([-0.0, 0.0, -1.5, 2.0, float("nan")])
    got = tpg.compile(lambda v: torch.relu(v) * 1.0, backend="triton")(x)
    # CUDA eager (H200): relu(-0.0) = 0.0, relu(nan) = nan
    assert _bits(got) == _bits(torch.tensor([0.0, 0.0, 0.0, 2.0, float("nan")]))


def test_a_nan_cast_to_an_integer_is_cuda_eagers_value(gpu_spellings):
    x = torch.tensor([1.5, -2.5, float("nan"), 7.0])
    got = tpg.compile(lambda v: (v * 2.0).int(), backend="triton")(x)
    assert got.tolist() == [3, -5, 0, 14]  # CUDA: NaN -> 0 (CPU eager: INT_MIN)
    got = tpg.compile(lambda v: (v * 2.0).long(), backend="triton")(x)
    assert got.tolist() == [3, -5, -2 ** 63, 14]  # CUDA: NaN -> INT64_MIN (GPU fuzz 101120048)


def _negative_zero_literals(source: str) -> int:
    """How many times ``source`` spells a unary ``-0.0`` (what Triton 3.6 compiles to +0.0)."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
    return sum(1 for before, minus, number in zip(tokens, tokens[1:], tokens[2:])
               if minus.string == "-" and number.type == tokenize.NUMBER
               and float(number.string) == 0.0 and before.type == tokenize.OP
               and before.string not in (")", "]"))


@pytest.mark.parametrize("fn", [lambda v: v / -0.0 + 3.25, lambda v: torch.where(v > 0, -0.0, v),
                                lambda v: -(v * 0.0) * 3.5, lambda v: v * -0.0 - 1.25])
def test_negative_zero_keeps_its_sign(fn, monkeypatch, tmp_path):
    monkeypatch.setattr(triton_cache, "_DEFAULT", triton_cache.KernelCache(tmp_path))
    x = torch.tensor([1.5, -2.0, 0.0, 3.0])
    assert _bits(tpg.compile(fn, backend="triton")(x)) == _bits(fn(x))
    sources = [p.read_text() for p in tmp_path.rglob("*.py")]
    assert sources and all(_negative_zero_literals(s) == 0 for s in sources), sources
