"""``opcheck``'s AOT check for torch ops: compile a call of the op for training for real.

``torch.compile(..., backend="tensorplay_graph", dynamic=True)`` with every floating
input requiring grad takes the AOTAutograd path (:mod:`.aot`); outputs and
gradients must equal eager's, and an op with ``register_autograd`` must stay one
opaque node in the forward graph.
"""

from __future__ import annotations

from typing import Any, Callable, List


def check_aot_training(op: Any, program: Callable[..., Any], examples: List[Any]) -> None:
    """Raise AssertionError when the compiled training call of ``op`` diverges from eager."""
    import torch

    from ..compiler import torch_backend
    from .aot import programs_built, programs_since

    if op.mutates_args or not op.has_fake:
        return  # AOTAutograd refuses to differentiate through mutated leaves; no fake: no trace
    if not all(isinstance(e, torch.Tensor) for e in examples):
        return
    if not any(e.is_floating_point() for e in examples):
        return
    # A fresh code object per call: Dynamo caches per code object, and opcheck runs
    # the same wrapper for every op it checks.
    fresh = type(program)(program.__code__.replace(co_name=f"opcheck_{op.opname}"),
                          program.__globals__, None, program.__defaults__, program.__closure__)
    fresh.__signature__ = getattr(program, "__signature__", None)
    compiled = torch.compile(fresh, backend=torch_backend, dynamic=True, fullgraph=True,
                             options={"backends": ["reference"]})

    def run(fn: Callable[..., Any]) -> tuple:
        inputs = [e.detach().clone().requires_grad_(e.is_floating_point()) for e in examples]
        out = fn(*inputs)
        outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                if isinstance(o, torch.Tensor) and o.requires_grad]
        if outs:
            torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
        return out, [i.grad for i in inputs]

    before = programs_built()
    want_out, want_grads = run(program)
    got_out, got_grads = run(compiled)
    torch.testing.assert_close(got_out, want_out, equal_nan=True,
                               msg=lambda m: f"{op.name}: compiled training output: {m}")
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        if (g is None) != (w is None):
            raise AssertionError(f"{op.name}: compiled gradient of input {i} is "
                                 f"{'missing' if g is None else 'present'}, unlike eager")
        if g is not None:
            torch.testing.assert_close(g, w, equal_nan=True,
                                       msg=lambda m: f"{op.name}: gradient of input {i}: {m}")
    built = programs_since(before)
    if not built:
        raise AssertionError(f"{op.name}: the training call did not reach the AOTAutograd path")
    if op.has_autograd and built[-1].eager_reason is None and op.name not in built[-1].bridged:
        raise AssertionError(f"{op.name}: register_autograd op was not kept opaque for AOTAutograd")
