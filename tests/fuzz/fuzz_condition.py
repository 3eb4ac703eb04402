"""Is a mismatch within eager's own sensitivity to its inputs' rounding? (ill-conditioning)

Some programs are ill-conditioned functions of their float32 inputs: the log of a mean
that cancels to 0 (-inf, or NaN, or -16 by the last bit), ``x - mean`` over nearly equal
large values. Eager and a correct compiled program round differently and land far apart,
so such a mismatch says nothing about the compiler. Before one is reported, eager is run
again on inputs -- and the program's inexact float literals (``1e-3``) -- perturbed by a
few float32 ulps (`x ** (1e-3 * x).sum()` on int32 x summing to 0: eager's sum is 0.0 by
its summation order, a kernel's -4.7e-10, seed 6000649); it counts as ill-conditioned only when,
at EVERY element that differs, eager itself moved at least as far as the compiled result
is from it (a class change -- NaN, +-inf, the sign of a zero -- only by a class change).

Kept exact, so that a real bug at an exact value stays visible: integer, bool and 16-bit
inputs, zeros, infinities, NaNs, and float32 values and literals that are multiples of 1/64
(1.0, 0.5, integers: the values a program's constants can tie with).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import replace
from typing import Any, Callable, List, Optional, Sequence

import numpy as np

from fuzz_program import DEVICE, Program, as_tuple, build_function

#: Perturbed eager runs, and the largest perturbation in float32 ulps.
TRIES, MAX_ULPS = 6, 4


def _perturbed(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """float32 ``values`` moved by 1..MAX_ULPS ulps either way, except the exact ones."""
    generic = np.isfinite(values) & (values != 0) & (values * 64 != np.round(values * 64))
    steps = rng.integers(1, MAX_ULPS + 1, size=values.shape) * rng.choice([-1, 1], values.shape)
    bits = values.astype(np.float32).view(np.int32)
    moved = np.where(generic, bits + steps.astype(np.int32), bits).astype(np.int32)
    return moved.view(np.float32)


#: A float literal in a statement's code (``1e-3``, ``0.5``; not ``x0``, ``{0}`` or ``1:``).
_FLOAT_LITERAL = re.compile(r"(?<![\w.{])(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+)(?![\w.])")


def _perturb_literals(program: Program, rng: np.random.Generator) -> Program:
    """``program`` with each inexact float literal moved like an input element."""
    def move(match: "re.Match[str]") -> str:
        value = np.array([float(match.group(0))], np.float32)
        moved = _perturbed(value, rng)
        return match.group(0) if moved[0] == value[0] else repr(float(moved[0]))
    return replace(program, stmts=[replace(s, code=_FLOAT_LITERAL.sub(move, s.code))
                                   for s in program.stmts])


def motion_covers(rows: Sequence[tuple]) -> Optional[List[str]]:
    """For rows ``(label, want, got, moved, mask)`` (NumPy arrays; ``moved``: how far eager's
    perturbed runs moved from ``want``), one description per row when at EVERY masked element
    eager moved (> 0) at least as far as ``got`` is from ``want``; else None."""
    worst = []
    for label, want, got, moved, mask in rows:
        off, eager = distance(want, got)[mask], moved[mask]
        if not np.all((off <= eager) & (eager > 0)):
            return None
        worst.append(f"{label}: {int(mask.sum())} elements off by up to {off.max():.3g}, "
                     f"eager itself moves by up to {eager.max():.3g}")
    return worst


def _perturb_inputs(args: Sequence[Any], rng: np.random.Generator, to_numpy: Callable) -> None:
    """Overwrite each float32 input tensor's values in place (its layout stays eager's)."""
    for t in args:
        if not hasattr(t, "dtype") or str(t.dtype).split(".")[-1] != "float32" or not t.numel():
            continue
        T = importlib.import_module(type(t).__module__.split(".")[0])
        t.copy_(T.from_numpy(np.ascontiguousarray(_perturbed(to_numpy(t), rng))))


def distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise |a - b| with classes: NaN vs not NaN, or inf vs another value, is inf;
    equal values are 0 except zeros of opposite signs (the smallest positive float)."""
    shape = np.shape(a)
    a, b = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(a - b)
    d[a == b] = 0.0
    d[(a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b))] = np.finfo(np.float64).tiny
    d[np.isnan(a) & np.isnan(b)] = 0.0
    d[np.isnan(a) != np.isnan(b)] = np.inf
    return d.reshape(shape)


def ill_conditioned(program: Program, want: tuple, got: tuple, bad: List[Optional[np.ndarray]],
                    to_numpy: Callable) -> Optional[str]:
    """Why the mismatch of ``got`` against eager's ``want`` is eager's own sensitivity, or None.

    ``bad[k]``: the elements of output k that differ (None: output k matches).
    """
    rng = np.random.default_rng(0)
    return eager_moves(lambda: build_function(_perturb_literals(program, rng), device=DEVICE),
                       rng, want, got, bad, to_numpy)


def eager_moves(variant: Callable, rng: np.random.Generator, want: tuple, got: tuple,
                bad: List[Optional[np.ndarray]], to_numpy: Callable) -> Optional[str]:
    """:func:`ill_conditioned` over ``variant() -> (fn, inputs)``, eager's perturbed program."""
    moved = [np.zeros(np.shape(to_numpy(w)), np.float64) for w in want]
    for _ in range(TRIES):
        fn, inputs = variant()
        args = inputs()
        _perturb_inputs(args, rng, to_numpy)
        try:
            again = as_tuple(fn(*args))  # a dict / list / bare return, flattened as check() does
        except Exception:  # noqa: BLE001 - eager rejects a perturbed input: no verdict
            return None
        for k, (w, a) in enumerate(zip(want, again)):
            if tuple(np.shape(to_numpy(a))) != moved[k].shape:
                return None
            moved[k] = np.maximum(moved[k], distance(to_numpy(w), to_numpy(a)))
    worst = motion_covers([(f"output {k}", to_numpy(want[k]), to_numpy(got[k]), moved[k], mask)
                           for k, mask in enumerate(bad) if mask is not None])
    if not worst:
        return None
    return (f"ill-conditioned: inputs and literals moved by <= {MAX_ULPS} ulps move eager as far as the "
            f"compiled result is from it ({'; '.join(worst)})")
