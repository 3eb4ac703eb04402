"""A float64 arbiter for zoo cells: is a difference from eager float32 rounding?

Two float32 summation orders of one large, cancelling sum differ by more than the zoo's
element-wise tolerance while neither is wrong: timm's DLA-34 at random init has first-layer
weight gradients up to 2e4, and on the CPU eager float32 itself is 0.03 away from float64
there, past ``rtol=1e-3``. When a comparison fails, the arbiter runs the same model (built
again from its seed) and inputs in float64 and calls the difference rounding when the compiled
value is no further from float64 than :data:`FACTOR` times eager's own distance. A real defect
is off by about the value's own magnitude, orders of magnitude beyond that.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

#: how much further from float64 than eager's float32 the compiled result may be
FACTOR = 4.0


def _double(value: Any, device: str) -> Any:
    import torch
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.double() if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_double(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _double(v, device) for k, v in value.items()}
    return value


class Float64Reference:
    """The spec's outputs and gradients in float64, computed on first use (torch models)."""

    def __init__(self, spec: Any, grad: bool, device: str, loss: Any) -> None:
        self.spec, self.grad, self.device, self.loss = spec, grad, device, loss
        self._values: Optional[Dict[str, Any]] = None

    def value(self, what: str) -> Any:
        """The float64 value compared as ``what`` ("output" or "grad[<name>]"), or None."""
        if self.spec.framework != "torch":
            return None
        if self._values is None:
            self._values = self._run()
        return self._values.get(what)

    def _run(self) -> Dict[str, Any]:
        import torch
        model, args, kwargs = self.spec.build()
        model = model.to(self.device).double()
        with torch.enable_grad() if self.grad else torch.no_grad():
            out = model(*_double(args, self.device), **_double(kwargs, self.device))
            values = {"output": out}
            if self.grad:
                self.loss(torch, out).backward()
                values.update({f"grad[{name}]": p.grad for name, p in model.named_parameters()
                               if p.grad is not None})
        return values


def _arrays(value: Any) -> list:
    from .harness import _numpy, leaves
    return [np.asarray(_numpy(t), np.float64) for _, t in leaves(value)]


def within_rounding(expected: Any, actual: Any, reference: Any, atol: float) -> Optional[float]:
    """The largest difference between ``actual`` and ``expected`` when every leaf of
    ``actual`` is within FACTOR x eager's distance from float64 (plus ``atol``), else None."""
    exp, act, ref = _arrays(expected), _arrays(actual), _arrays(reference)
    if not (len(exp) == len(act) == len(ref)):
        return None
    worst = 0.0
    for e, a, r in zip(exp, act, ref):
        if e.shape != r.shape or a.shape != r.shape:
            return None
        eager_error = float(np.max(np.abs(e - r), initial=0.0))
        if not float(np.max(np.abs(a - r), initial=0.0)) <= FACTOR * eager_error + atol:
            return None  # also NaN
        worst = max(worst, float(np.max(np.abs(a - e), initial=0.0)))
    return worst
