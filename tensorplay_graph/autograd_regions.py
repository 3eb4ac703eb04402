"""How compiled graphs run when gradients are needed.

Policy: when any input or captured parameter requires grad and the framework's
grad mode is on, a runner built with a ``train`` factory runs the compiled
forward/backward pair (:mod:`.training.step`: backward graph from the prims' VJP
rules, both halves lowered). Otherwise -- no backend chosen, or the program
cannot be differentiated in our IR (``explain()`` says why) -- the *captured*
graph runs through eager dispatch instead of the lowered one. The framework's autograd then records
every op, and custom ops go through their own ``register_autograd``
formulas, so results and gradients equal eager. Without grad (inference,
``no_grad``) the lowered graph with its fused kernels runs. The switch is
decided per call and logged once per process.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Optional

from .frameworks import adapter_for, framework_of, is_tensor

logger = logging.getLogger("tensorplay_graph.compile")

_policy_logged = False


def grad_enabled(framework: str) -> bool:
    """The framework's global grad mode (``True`` if it was never imported)."""
    adapter = adapter_for(framework)
    return adapter.is_grad_enabled() if adapter.loaded() else True


def _grad_mode_of(values: Iterable[Any]) -> Callable[[], bool]:
    """The grad-mode switch of the framework of the first tensor in ``values``."""
    for value in values:
        framework = framework_of(value)
        if framework is not None:
            return adapter_for(framework).grad_mode_query()
    return lambda: True


def graph_constants(gm: Any) -> list:
    """Tensors a GraphModule reads through ``get_attr`` (parameters, buffers, constants)."""
    found = [constant_at(gm, node.target) for node in gm.graph.nodes if node.op == "get_attr"]
    return [value for value in found if is_tensor(value)]


def constant_at(gm: Any, target: Any) -> Any:
    """The value at a ``get_attr`` target (``"layer.weight"``) of ``gm``, or None."""
    value = gm
    try:
        for part in str(target).split("."):
            value = getattr(value, part)
    except AttributeError:
        return None
    return value


def _metas_unknown(gm: Any, args: tuple) -> bool:
    from .passes.shape_prop_data import unknown_metas
    return bool(unknown_metas(gm, args))


def _log_policy_once() -> None:
    global _policy_logged
    if not _policy_logged:
        _policy_logged = True
        logger.info(
            "inputs require grad: running the captured graph through eager dispatch "
            "(no lowered kernels) so autograd records every op; custom ops keep their "
            "register_autograd formulas")


class GraphRunner:
    """One compiled specialization: the captured graph and its lazily lowered twin.

    ``lower(args)`` builds the lowered callable from the first call's inputs
    that actually needs it, so a training-only specialization never pays for
    kernel compilation. ``lowered is None`` after ``lower`` returned ``None``
    means "no backend chosen": the captured graph is the interpreter.
    """

    def __init__(self, captured: Callable[..., Any],
                 lower: Optional[Callable[[tuple], Optional[Callable[..., Any]]]],
                 constants: Iterable[Any] = (), eager: Optional[Callable[..., Any]] = None,
                 no_grad: Optional[Callable[..., Any]] = None,
                 train: Optional[Callable[[tuple], Any]] = None) -> None:
        self.captured = captured
        #: What runs the captured graph through eager dispatch (``eager_dispatch``), and
        #: its variant for calls where no value can need grad (reuses dead buffers).
        self.eager = eager if eager is not None else captured
        self.no_grad = no_grad if no_grad is not None else self.eager
        self._lower = lower
        #: ``train(args)`` builds the compiled forward/backward pair (``training.step``);
        #: ``training`` is what it built: compiled, or eager with its reason.
        self._train = train
        self.training: Any = None
        self._lowered: Optional[Callable[..., Any]] = None
        constants = list(constants)
        #: Whether the program reads tensor constants (one may start requiring grad later).
        self._has_constants = bool(constants)
        self._grad_constants = [c for c in constants if c.requires_grad]
        # A runner serves one specialization, whose key fixes each argument's
        # requires_grad: scanned once, on the first call.
        self._args_need_grad: Optional[bool] = None
        self._grad_mode: Callable[[], bool] = lambda: True
        self._metas_checked = False

    @property
    def lowered(self) -> Optional[Callable[..., Any]]:
        """The lowered callable, or ``None`` if not built yet / not needed."""
        return self._lowered

    def uses_eager_autograd(self, args: tuple) -> bool:
        """Whether this call must take the eager-dispatch path (see module docstring)."""
        if self._args_need_grad is None:
            self._args_need_grad = any(is_tensor(a) and a.requires_grad for a in args)
            self._grad_mode = _grad_mode_of(list(args) + self._grad_constants)
        if self._args_need_grad or (self._grad_constants and
                                    any(c.requires_grad for c in self._grad_constants)):
            return self._grad_mode()
        return False

    def steady_callable(self) -> Optional[Callable[..., Any]]:
        """What every later call runs, when that no longer depends on the call: the eager
        program when no backend was chosen (its buffer-reusing variant when no input needs
        grad and there are no constants), the lowered program once built when no input or
        constant needs grad; ``self`` while it depends on grad mode; ``None`` before
        lowering (not steady yet)."""
        if self._lower is not None:
            return None
        if self._lowered is not None:
            return self._lowered if self._args_need_grad is False and not self._grad_constants \
                else self
        if self.no_grad is self.eager:
            return self.eager
        return self.no_grad if self._args_need_grad is False and not self._has_constants else self

    @property
    def speculative(self) -> bool:
        """Whether the lowered program is a CUDA-graph replay that may run ahead of the
        caller's state checks (:meth:`launch`)."""
        return bool(getattr(self._lowered, "speculative", False))

    def launch(self, *args: Any) -> bool:
        """Launch the lowered program's CUDA-graph replay for ``args`` ahead of the caller's
        state checks when nothing but a replay is needed (see ``CudaGraphRunner.launch``)."""
        lowered = self._lowered
        if lowered is None or self._lower is not None or self.uses_eager_autograd(args):
            return False
        launch = getattr(lowered, "launch", None)
        return launch is not None and launch(*args)

    def collect(self, launched: bool, *args: Any) -> Any:
        """The results of :meth:`launch`'s replay, or the whole call when it made none."""
        return self._lowered.collect(True, *args) if launched else self(*args)

    def __call__(self, *args: Any) -> Any:
        if self.uses_eager_autograd(args):
            if self._train is not None:
                if self.training is None:
                    self.training = self._train(args)
                if self.training.compiled:
                    return self.training(*args)
            if self._lower is not None or self._lowered is not None:
                _log_policy_once()
            return self.eager(*args)
        if self._lower is not None:
            if not self._metas_checked:
                self._metas_checked = True
                if _metas_unknown(self.captured, args):
                    # Opaque ops never ran at capture: this call is the program's own run
                    # (each op once) and teaches the metadata; the next call is lowered.
                    from .interpreter import run_recording_metas
                    return run_recording_metas(self.captured, args)
            self._lowered = self._lower(args)  # raises loudly; retried next call
            self._lower = None
        if self._lowered is not None:
            return self._lowered(*args)
        # Buffers are reused only where no value can need grad: not even a parameter that
        # starts requiring grad after the first call (unfreezing), unless grad mode is off.
        reuse = not self._has_constants or not self._grad_mode()
        return (self.no_grad if reuse else self.eager)(*args)
