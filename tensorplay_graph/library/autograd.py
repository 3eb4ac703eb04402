"""``register_autograd`` as the framework's own ``autograd.Function``.

One Function class per (op, framework) is built lazily on first use, so a
registration imports neither framework.  ``apply`` receives a ``_Call``
record first (the resolved kernel and keyword names: a plain object keeps
TensorPlay's flat fast path), then the positional arguments, then the
keyword values; ``setup_context`` and ``backward`` see only the user's
inputs, in that order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..frameworks import adapter_for

if TYPE_CHECKING:  # pragma: no cover
    from .custom_op import CustomOpDef


class _Call:
    """The kernel and the keyword names of one autograd call."""

    __slots__ = ("kernel", "kwnames")

    def __init__(self, kernel: Callable[..., Any], kwnames: tuple[str, ...]) -> None:
        self.kernel = kernel
        self.kwnames = kwnames

    def run(self, flat: tuple) -> Any:
        if not self.kwnames:
            return self.kernel(*flat)
        split = len(flat) - len(self.kwnames)
        return self.kernel(*flat[:split], **dict(zip(self.kwnames, flat[split:])))


def _normalize_grads(op_name: str, grads: Any, n_inputs: int) -> tuple:
    if not isinstance(grads, (tuple, list)):
        grads = (grads,)
    grads = tuple(grads)
    # Gradients of defaulted parameters the call did not pass may come back as None.
    while len(grads) > n_inputs and grads[-1] is None:
        grads = grads[:-1]
    if len(grads) > n_inputs:
        raise RuntimeError(
            f"{op_name}: backward returned {len(grads)} gradients for {n_inputs} inputs; "
            "return one gradient (or None) per input"
        )
    return (None,) + grads + (None,) * (n_inputs - len(grads))


def build_function(op: "CustomOpDef", framework: str) -> type:
    """A ``<framework>.autograd.Function`` subclass running ``op``'s formula."""
    base = adapter_for(framework).autograd_function()

    def forward(call: _Call, *flat: Any) -> Any:
        return call.run(flat)

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx._tpg_n_inputs = len(inputs) - 1  # backward pads its result to this length
        if op._setup_context is not None:
            op._setup_context(ctx, tuple(inputs[1:]), output)

    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        return _normalize_grads(op.name, op._backward(ctx, *grad_outputs), ctx._tpg_n_inputs)

    namespace = {
        "forward": staticmethod(forward),
        "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward),
    }
    if op._vmap_fn is not None:
        vmap_fn = op._vmap_fn

        def vmap(info: Any, in_dims: Any, call: _Call, *flat: Any) -> Any:
            return vmap_fn(info, in_dims[1:], *flat)

        namespace["vmap"] = staticmethod(vmap)
    cls = type(f"CustomOpAutograd_{op.namespace}_{op.opname}", (base,), namespace)
    cls.__qualname__ = f"CustomOpAutograd[{op.name}]"
    return cls


def apply(op: "CustomOpDef", framework: str, kernel: Callable, args: tuple, kwargs: dict) -> Any:
    """Run ``kernel`` through ``op``'s Function for ``framework``."""
    cls = op._autograd_fns.get(framework)
    if cls is None:
        cls = op._autograd_fns.setdefault(framework, build_function(op, framework))
    kwnames = tuple(kwargs)
    flat = args + tuple(kwargs.values()) if kwnames else args
    return cls.apply(_Call(kernel, kwnames), *flat)
