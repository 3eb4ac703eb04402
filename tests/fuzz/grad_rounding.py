"""Is a gradient-fuzz mismatch the compiler's, or eager's own arithmetic?

:func:`unless_unstable` turns a mismatch into a skip when eager's results change between two
runs, when eager moves as far under a few ulps of its inputs and literals
(:func:`_ill_conditioned`), or when eager's float results are the ones off from a float64 run
(:func:`_eager_rounding`); otherwise the mismatch stands.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from fuzz_check import Outcome, _differ, compare, to_numpy as _np
from fuzz_condition import MAX_ULPS, TRIES, _perturb_inputs, _perturb_literals, distance, motion_covers
from grad_check import Call, Harness, Levels, _differs, _plain


def unless_unstable(h: Harness, want: "Call", levels: Levels, why: str,
                     got: Optional["Call"] = None) -> Outcome:
    """The mismatch, unless eager's own results change between two runs, or (``got``'s
    mismatch) eager moves as far under the rounding of its inputs and literals."""
    for _ in range(2):
        again = h.run(h.target)
        unstable = _differs(want, again, levels)
        if unstable:
            return Outcome("skip", f"eager is not deterministic: two eager runs differ: {unstable}")
    ill = None if got is None else \
        _ill_conditioned(h, want, got, levels) or _eager_rounding(h, want, got, levels)
    return Outcome("skip", ill) if ill else Outcome("mismatch", why)


def _eager_rounding(h: Harness, want: "Call", got: "Call", levels: Levels) -> Optional[str]:
    """Why ``got``'s mismatch is eager's own rounding error, or None: eager run again with its
    float inputs and parameters upcast to float64 (the same values) gives, for every output
    and gradient where ``got`` and eager differ, ``got``'s values within the usual tolerance
    and not eager's. ``layer_norm`` over rows of two nearly equal float16 values (seed
    99750253): the float64 gradient is +-26.9, float16 eager's 0.918 / -30.98 (a row's
    gradients must sum to 0), ours +-26.92. Perturbing the inputs by ulps
    (``_ill_conditioned``) cannot show it: the error is eager's arithmetic, not its inputs'."""
    if not isinstance(got.outs, tuple) or len(got.outs) != len(want.outs) or any(
            (w is None) != (got.grads.get(n) is None) for n, w in want.grads.items()):
        return None  # a None gradient against a tensor is no rounding
    try:
        exact_h = Harness(h.program, h.entry)
        if exact_h.module is not None:
            exact_h.module.double()
        exact = exact_h.run(exact_h.target, upcast=True)
    except Exception:  # noqa: BLE001 - a program float64 cannot run: no verdict
        return None
    if not isinstance(exact.outs, tuple) or len(exact.outs) != len(want.outs):
        return None
    rows = [(f"output {k}", w, _plain(g, w), e, lv)
            for k, (w, g, e, lv) in enumerate(zip(want.outs, got.outs, exact.outs, levels.outputs))]
    rows += [(f"{n}.grad", w, got.grads.get(n), exact.grads.get(n), levels.grads)
             for n, w in want.grads.items() if w is not None]
    eager_off = []
    for label, w, g, e, level in rows:
        if g is None or compare(w, g, level, levels.lowp) is None:
            continue  # no mismatch here
        if e is None or type(e) is not type(w) or tuple(e.shape) != tuple(w.shape):
            return None
        e = e.detach().to(w.dtype)
        why = compare(e, w, level, levels.lowp)
        if why is None or compare(e, g, level, levels.lowp):
            return None  # eager matches float64 there, or the compiled result does not
        eager_off.append(f"{label} (\"eager\" here: float64, \"got\": eager): {why}")
    if not eager_off:
        return None
    return ("eager's rounding: where the compiled results differ from eager's they equal "
            f"eager's float64 evaluation, eager's float results do not ({'; '.join(eager_off)})")


def _ill_conditioned(h: Harness, want: "Call", got: "Call", levels: Levels) -> Optional[str]:
    """Why ``got``'s mismatch (outputs, gradients) is eager's own sensitivity, or None: as
    ``fuzz_condition.ill_conditioned`` -- eager autograd is run again with its float32
    inputs and the program's float literals moved by a few ulps, and at EVERY output and
    gradient element that differs eager itself moved at least as far (``layer_norm(x / x)``:
    eager's gradient is rounding residue amplified by 1 / sqrt(eps), ours exact zeros; torch
    seed 71000287. ``layer_norm(x + 70000.0)``: float32 keeps x to 1/128, and eager's mean is
    as far from the exact one as ours; seed 99860152)."""
    if not isinstance(got.outs, tuple) or len(got.outs) != len(want.outs) or any(
            compare(w, got.args[n], levels.inputs[n], levels.lowp) for n, w in want.args.items()):
        return None
    rows = []  # (label, the value in a call, the elements that differ)
    for k, (w, g, lv) in enumerate(zip(want.outs, got.outs, levels.outputs)):
        reason, mask = _differ(w, _plain(g, w), lv, levels.lowp)
        if reason is not None:
            if mask is None:
                return None  # a dtype / shape difference is no rounding
            rows.append((f"output {k}", lambda c, k=k: c.outs[k], mask))
    for name, w in want.grads.items():
        g = got.grads.get(name)
        if w is None or g is None:
            if (w is None) != (g is None):
                return None
            continue
        reason, mask = _differ(w, g, levels.grads, levels.lowp)
        if reason is not None:
            if mask is None:
                return None
            rows.append((f"{name}.grad", lambda c, n=name: c.grads[n], mask))
    if not rows:
        return None
    rng = np.random.default_rng(0)
    moved = [np.zeros(np.shape(_np(value(want))), np.float64) for _, value, _ in rows]
    for _ in range(TRIES):
        try:
            variant = Harness(_perturb_literals(h.program, rng), h.entry)
            again = variant.run(variant.target,
                                perturb=lambda args: _perturb_inputs(args, rng, _np))
        except Exception:  # noqa: BLE001 - eager rejects a perturbed input: no verdict
            return None
        for i, (_, value, _) in enumerate(rows):
            if value(again) is None or np.shape(_np(value(again))) != moved[i].shape:
                return None
            moved[i] = np.maximum(moved[i], distance(_np(value(want)), _np(value(again))))
    worst = motion_covers([(label, _np(value(want)), _np(value(got)), moved[i], mask)
                           for i, (label, value, mask) in enumerate(rows)])
    if worst is None:
        return None
    return (f"ill-conditioned: inputs and literals moved by <= {MAX_ULPS} ulps move eager as "
            f"far as the compiled results are from it ({'; '.join(worst)})")
