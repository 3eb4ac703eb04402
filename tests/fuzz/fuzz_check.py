"""Run one fuzz program eagerly and compiled, compare, and shrink failures to minimal repros.

A program eager rejects is skipped. Otherwise the compiled function is called twice
(the compiling call and a steady-state call) on fresh copies of the inputs; each call
must return the same number of outputs, each of eager's type, dtype and shape, with
equal values (bitwise for integers and bool, NaN / inf positions equal, per-dtype
tolerance for floats), and leave the inputs as eager left them. An exception from the
compiled function is a crash. A mismatch is skipped, not reported, when eager itself is
not deterministic or the program is ill-conditioned (fuzz_condition.py): both are counted
apart from the programs compared.
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

from fuzz_condition import ill_conditioned
from fuzz_gen import FLOATS, dtype_name, levels
from fuzz_program import DEVICE, Program, as_tuple, build_function, repro_source, same_form

#: Relative tolerance per dtype, scaled by the output's largest finite magnitude (fusion
#: reassociates sums and keeps float16 / bfloat16 intermediates in float32, as Inductor does).
#: float64 results (TensorPlay's ``python_float ** tensor``) are always computed from float32 or
#: narrower data (the generator makes no float64 input): one float32 ulp of an operand shows
#: up amplified there, so they get float32's tolerance.
RTOL = {"float64": 1e-4, "float32": 1e-4, "float16": 1e-2, "bfloat16": 6e-2}
#: Result dtypes compared with a tolerance: the generated ones, and float64, which TensorPlay's
#: ``python_float ** tensor`` promotes to.
RESULT_FLOATS = FLOATS + ("float64",)


@dataclass
class Outcome:
    status: str          # "ok" | "skip" | "mismatch" | "crash"
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("mismatch", "crash")

    def signature(self) -> str:
        """A coarse key for grouping: status plus the first line with numbers removed."""
        first = self.detail.splitlines()[0] if self.detail else ""
        first = re.sub(r"0x[0-9a-f]+|\d+(\.\d+)?(e[-+]?\d+)?", "#", first)
        return f"{self.status}: {first[:120]}"

#: Skip verdicts that call a mismatch rounding, not the compiler's error: eager moves as far
#: under its inputs' rounding (``fuzz_condition``), or float64 eager gives the compiled
#: results (``grad_rounding._eager_rounding``).
ROUNDING_VERDICTS = ("ill-conditioned", "eager's rounding")


def to_numpy(t: Any) -> np.ndarray:
    name = dtype_name(t)
    if hasattr(t, "detach"):
        t = t.detach()
    if name in FLOATS:
        t = t.float()
    if type(t).__module__.startswith("torch"):
        return t.contiguous().cpu().numpy().copy()
    return np.array(t.contiguous().numpy(), copy=True)


def compare(want: Any, got: Any, level: int, lowp: bool) -> Optional[str]:
    """None when ``got`` matches ``want``; otherwise what differs."""
    why, bad = _differ(want, got, level, lowp)
    if why is None or bad is None:
        return why
    e, g, name = to_numpy(want), to_numpy(got), dtype_name(want)
    shown = [tuple(int(i) for i in idx) for idx in np.argwhere(bad)[:4]]
    pairs = ", ".join(f"{idx}: eager {e[idx]!r} got {g[idx]!r}" for idx in shown)
    return f"values differ at {int(bad.sum())}/{e.size} elements ({name}): {pairs}"


def _differ(want: Any, got: Any, level: int, lowp: bool) -> Tuple[Optional[str], Optional[np.ndarray]]:
    """(None, None) when ``got`` matches ``want``; else (what differs, the mask of the elements
    that differ -- None when the type, dtype or shape already differ)."""
    if type(got) is not type(want):
        return f"type {type(got).__module__}.{type(got).__name__} != eager's {type(want).__name__}", None
    if dtype_name(got) != dtype_name(want):
        return f"dtype {dtype_name(got)} != eager's {dtype_name(want)}", None
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)} != eager's {tuple(want.shape)}", None
    if level >= 3:
        return None, None
    e, g = to_numpy(want), to_numpy(got)
    name = dtype_name(want)
    if name in RESULT_FLOATS:
        scale = max(1.0, float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)))
        # A 16-bit intermediate (a reduction's result, a fused op kept in float32) may round
        # differently from eager's: one 16-bit ulp of a float16 mean shifts every element of a
        # float32 result computed from it (seed 2019705).
        rtol = max(RTOL[name], RTOL["float16"]) if lowp and level >= 1 else RTOL[name]
        tol = rtol * scale
        with np.errstate(invalid="ignore"):
            close = (np.abs(e - g) <= tol) | (np.isnan(e) & np.isnan(g)) | (e == g)
            if level == 0:  # exact ops keep the sign of zero
                close &= ~((e == 0) & (g == 0) & (np.signbit(e) != np.signbit(g)))
    else:
        close = e == g
    bad = ~np.asarray(close, bool).reshape(e.shape)
    allowed = 0 if level < 2 and not (lowp and level >= 1) else max(1, e.size // 50)
    if int(bad.sum()) <= allowed:
        return None, None
    return "values differ", bad


def check(program: Program, backend: str, calls: Optional[int] = None) -> Outcome:
    """``calls``: compiled calls, each compared with eager; default 2, or 3 off the CPU (the
    first call compiles, the second records a CUDA graph, the third replays it). Every
    call's results are compared again after the last call: a later call must not change a
    result the caller still holds."""
    import tensorplay_graph as tpg
    info = levels(program)
    if info is None:
        return Outcome("skip", "eager rejects the program")
    out_levels, in_levels, lowp = info
    calls = calls or (2 if DEVICE == "cpu" else 3)
    fn, inputs = build_function(program, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager_in = inputs()
        try:
            want_raw = fn(*eager_in)
            want = as_tuple(want_raw)
        except Exception as exc:  # noqa: BLE001 - eager's own rejection: not counted
            return Outcome("skip", f"eager raises {type(exc).__name__}: {exc}")
        try:
            compiled = tpg.compile(fn, backend=backend)
        except Exception as exc:  # noqa: BLE001
            return Outcome("crash", f"compile(): {type(exc).__name__}: {_first(exc)}")
        held: List[tuple] = []  # every call's results, kept as a caller may keep them
        for call in range(1, calls + 1):
            args = inputs()
            try:
                got_raw = compiled(*args)
            except Exception as exc:  # noqa: BLE001
                return Outcome("crash", f"{type(exc).__name__}: {_first(exc)} (call {call})")
            got = as_tuple(got_raw)
            if not same_form(want_raw, got_raw) or len(got) != len(want):
                return Outcome("mismatch", f"returned {type(got_raw).__name__} of {len(got)} "
                               f"values, eager {type(want_raw).__name__} of {len(want)} "
                               f"(call {call})")
            for k, (w, g, lv) in enumerate(zip(want, got, out_levels)):
                why = compare(w, g, lv, lowp)
                if why:
                    unstable = _eager_unstable(fn, inputs, want, out_levels, lowp)
                    if unstable:
                        return Outcome("skip", unstable)
                    masks = [_differ(w2, g2, lv2, lowp) for w2, g2, lv2 in zip(want, got, out_levels)]
                    if all(reason is None or bad is not None for reason, bad in masks):
                        ill = ill_conditioned(program, want, got, [bad for _, bad in masks],
                                              to_numpy)
                        if ill:
                            return Outcome("skip", ill)
                    return Outcome("mismatch", f"output {k}: {why} (call {call})")
            for k, (w, g, lv) in enumerate(zip(eager_in, args, in_levels)):
                why = compare(w, g, lv, lowp)
                if why:
                    return Outcome("mismatch", f"input {k} after the call: {why} (call {call})")
            held.append(got)
        for call, got in enumerate(held, 1):
            for k, (w, g, lv) in enumerate(zip(want, got, out_levels)):
                why = compare(w, g, lv, lowp)
                if why:
                    return Outcome("mismatch", f"output {k} of call {call} changed by a later "
                                   f"call: {why}")
    return Outcome("ok")


def _eager_unstable(fn: Callable, inputs: Callable, want: tuple, out_levels, lowp: bool
                    ) -> Optional[str]:
    """Why eager itself disagrees with its first result on fresh inputs, or None.

    TensorPlay 1.0.0's 16-bit matmul of a non-contiguous operand changes from call to call
    (tests/fuzz/FINDINGS.md): such a program has no single eager answer to compare with.
    """
    for _ in range(2):
        again = as_tuple(fn(*inputs()))
        for k, (w, a, lv) in enumerate(zip(want, again, out_levels)):
            why = compare(w, a, lv, lowp)
            if why:
                return f"eager is not deterministic: output {k} differs between two eager calls: {why}"
    return None


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def shrink(program: Program, backend: str, outcome: Outcome, budget_s: float = 60.0,
           checker: Optional[Callable[[Program], Outcome]] = None) -> Tuple[Program, Outcome]:
    """Greedily drop statements / outputs / input quirks while the same kind of failure stays
    (``checker``: how a candidate is checked; default :func:`check` on ``backend``)."""
    deadline = time.monotonic() + budget_s
    kind = _kind(outcome)
    checker = checker or (lambda p: check(p, backend))

    def still(p: Optional[Program]) -> Optional[Outcome]:
        if p is None or time.monotonic() > deadline:
            return None
        p = p.pruned_inputs()
        o = checker(p)
        return o if o.failed and _kind(o) == kind else None

    best, best_outcome = program, outcome
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in reversed(range(len(best.stmts))):
            if i >= len(best.stmts):
                continue
            cand = best.without(i)
            o = still(cand)
            if o:
                best, best_outcome, changed = cand.pruned_inputs(), o, True
        if len(best.outputs) > 1:
            for out in list(best.outputs):
                cand = Program(best.framework, best.inputs, best.stmts, [out], best.seed, best.meta)
                o = still(cand)
                if o:
                    best, best_outcome, changed = cand.pruned_inputs(), o, True
                    break
        for k, spec in enumerate(best.inputs):
            for plain in (dict(layout="c"), dict(special=False)):
                if all(getattr(spec, f) == v for f, v in plain.items()):
                    continue
                inputs = list(best.inputs)
                inputs[k] = type(spec)(**{**spec.__dict__, **plain})
                cand = Program(best.framework, inputs, best.stmts, best.outputs, best.seed, best.meta)
                o = still(cand)
                if o:
                    best, best_outcome, changed = cand, o, True
    return best, best_outcome


def _kind(o: Outcome) -> str:
    if o.status == "crash":
        return "crash:" + o.detail.split(":")[0]
    return o.status


def run_many(programs: List[Program], backend: str, shrink_s: float = 30.0,
             deadline: Optional[float] = None,
             on_failure: Optional[Callable[[Program, Outcome, str], None]] = None,
             checker: Optional[Callable[[Program], Outcome]] = None,
             repro: Optional[Callable[[Program, str], str]] = None) -> dict:
    """Check each program; shrink failures (until ``deadline``, a ``time.monotonic()``
    value; later failures are reported unshrunk). Returns counts and the repros.
    ``checker`` / ``repro`` (program, note): another checker (default :func:`check` on
    ``backend``) and its repro writer."""
    checker = checker or (lambda p: check(p, backend))
    repro = repro or (lambda p, note: repro_source(p, backend, note))
    stats = {"programs": 0, "mismatches": 0, "crashes": 0, "skipped": 0, "ill_conditioned": 0,
             "failures": []}
    for program in programs:
        outcome = checker(program)
        if outcome.status == "skip":
            stats["skipped"] += 1
            stats["ill_conditioned"] += outcome.detail.startswith(ROUNDING_VERDICTS)
            continue
        stats["programs"] += 1
        if not outcome.failed:
            continue
        stats["mismatches" if outcome.status == "mismatch" else "crashes"] += 1
        budget = shrink_s if deadline is None else min(shrink_s, deadline - time.monotonic())
        small, small_outcome = shrink(program, backend, outcome, budget, checker) \
            if budget > 0 else (program, outcome)
        source = repro(small, small_outcome.detail)
        stats["failures"].append((small_outcome, source))
        if on_failure:
            on_failure(small, small_outcome, source)
    return stats


def run_and_report(label: str, programs: List[Program], backend: str, shrink_s: float,
                   shrink_total_s: float, checker: Optional[Callable[[Program], Outcome]] = None,
                   repro: Optional[Callable[[Program, str], str]] = None) -> dict:
    """``run_many`` for a test: fails it (with every minimal repro) on a mismatch or a crash,
    or when fewer than 90% of the programs ran (generation runs every statement eagerly, so
    skips mean the generator broke). Returns the counts."""
    import pytest

    stats = run_many(programs, backend, shrink_s=shrink_s,
                     deadline=time.monotonic() + shrink_total_s, checker=checker, repro=repro)
    n = len(programs)
    assert stats["programs"] >= 0.9 * n, f"only {stats['programs']} of {n} programs ran: {stats}"
    if stats["failures"]:
        repros = "\n\n".join(f"#### {o.status}: {o.detail}\n{src}" for o, src in stats["failures"])
        pytest.fail(f"{label}: {stats['mismatches']} mismatches and {stats['crashes']} crashes "
                    f"in {stats['programs']} programs; minimal repros (see "
                    f"tests/fuzz/FINDINGS.md):\n\n{repros}", pytrace=False)
    return stats
