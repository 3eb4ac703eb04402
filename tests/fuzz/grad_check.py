"""Run one gradient-fuzz program eagerly and compiled (one training entry point), compare.

Each call runs the program on fresh leaves that require grad (a module's parameters for
programs with ``meta["params"]``), sums its float outputs against seeded random cotangents
and calls ``backward()``. The compiled function must return eager's outputs (the forward
checker's :func:`fuzz_check.compare`, per-dtype tolerance), mark the same outputs as
requiring grad, leave every input as eager left it and give every leaf eager's ``.grad``
(``None`` where eager's is ``None``). The last call's backward keeps its graph
(``retain_graph``) and runs again: the gradients must double. A ``no_grad`` call must
return eager's outputs, none requiring grad. A program eager rejects is skipped, and so is
one whose eager results change from run to run; a program the compiler trains through eager
autograd passes with its reason noted (``Outcome.detail``), never silently.

Entry points (``ENTRIES``): ``reference`` -- ``tensorplay_graph.compile(fn, backend=
"reference")`` (our joint graph, lowered); ``triton`` -- the same with ``backend="triton"``
(torch programs; on the CPU under ``TRITON_INTERPRET=1``); ``auto`` -- ``backend="auto"`` (on the CPU the
captured graph through eager dispatch); ``framework`` -- ``torch.compile(fn,
backend="tensorplay_graph")`` (AOTAutograd) or ``tp.compile(fn, backend="tensorplay_graph")``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from fuzz_check import Outcome, _first, compare, to_numpy as _np
from fuzz_gen import FLOATS, dtype_name
from fuzz_program import DEVICE, Program, build_function, framework_modules
from grad_gen import grad_ops, make_grad_input, replay_grad, requires_grad

ENTRIES = ("reference", "auto", "framework", "triton")
OPTIONS = {"backends": ["reference"]}
#: torch.compile's first call (Dynamo + AOTAutograd) costs ~1.5 s: one program in eight.
FRAMEWORK_EVERY = 8


def entry_for(seed: int) -> str:
    """The entry point program ``seed`` goes through when they take turns (CI, ``rotate``)."""
    if seed % FRAMEWORK_EVERY == 0:
        return "framework"
    return "reference" if seed % 2 else "auto"


def every_output_for(entry: str, framework: str) -> bool:
    """Whether the loss of a program run through ``entry`` uses every output (see Harness)."""
    return entry == "framework" and framework == "torch"


def compile_entry(entry: str, target: Any, framework: str) -> Callable[..., Any]:
    """``target`` compiled through training entry point ``entry``."""
    import tensorplay_graph as tpg
    if entry in ("reference", "auto", "triton"):  # triton: CPU tensors under TRITON_INTERPRET=1
        return tpg.compile(target, backend=entry)
    if entry != "framework":
        raise ValueError(f"unknown entry point {entry!r}; choose from {ENTRIES}")
    if framework == "torch":
        import torch
        return torch.compile(target, backend="tensorplay_graph", options=OPTIONS, dynamic=False)
    import tensorplay
    return tensorplay.compile(target, backend="tensorplay_graph", options=OPTIONS)


def differentiable(t: Any) -> bool:
    """A float tensor that requires grad (float64: TensorPlay's ``2.0 ** x``)."""
    return hasattr(t, "requires_grad") and dtype_name(t) in FLOATS + ("float64",) and \
        bool(t.requires_grad)


def backward_loss(outs: Any, seed: int, every_output: bool = False) -> Optional[Any]:
    """``sum_k (out_k.float() * cotangent_k).sum()`` over the outputs that require grad
    (cotangents: seeded float32 normals), or None when none does. Of two or more such
    outputs, about one in four (seeded; never all) is left out of the loss unless
    ``every_output``: an output the loss did not use gets no gradient in eager, and a compiled
    backward must agree."""
    loss = None
    outs = outs if isinstance(outs, tuple) else (outs,)
    used = [k for k, out in enumerate(outs) if differentiable(out)]
    if len(used) >= 2 and not every_output:
        kept = [k for k in used if np.random.default_rng(seed * 97 + k).random() >= 0.25]
        used = kept or used[-1:]
    for k in used:
        out = outs[k]
        rng = np.random.default_rng(seed * 31 + k)
        cot = np.asarray(rng.standard_normal(tuple(out.shape)), dtype=np.float32)
        cot = module_of(out).from_numpy(cot)
        term = (out.float() * (cot if DEVICE == "cpu" else cot.to(out.device))).sum()
        loss = term if loss is None else loss + term
    return loss


def module_of(t: Any) -> Any:
    return framework_modules("torch" if type(t).__module__.startswith("torch")
                             else "tensorplay")[0]


class Harness:
    """The program as a function or, with ``meta["params"]``, a module holding those
    inputs as parameters; ``run`` calls it on fresh inputs and runs the backward."""

    def __init__(self, program: Program, entry: str = "reference") -> None:
        self.program, self.fw, self.entry = program, program.framework, entry
        #: torch.compile's AOTAutograd gives an input reached only through outputs the loss
        #: left out a zero gradient where eager leaves None (torch's own aot_eager does the
        #: same): through that entry point every output is in the loss
        self.every_output = every_output_for(entry, program.framework)
        self.T, _ = framework_modules(self.fw)
        self._make = lambda spec: make_grad_input(self.T, spec, DEVICE)
        self.fn, _ = build_function(program, grad_ops(self.fw))
        specs = {s.name: s for s in program.inputs}
        self.params = [n for n in program.meta.get("params", ()) if n in specs
                       and requires_grad(specs[n])]
        self.args_specs = [s for s in program.inputs if s.name not in self.params]
        self.module = None
        if self.params:
            ns = {"T": self.T, "program": self.fn}
            exec(module_source(program, self.params), ns)
            values = {n: self._make(specs[n]).detach() for n in self.params}
            self.module = ns["Net"](values)
        self.target = self.module if self.module is not None else self.fn

    def leaves(self, args: List[Any]) -> Dict[str, Any]:
        """The arguments that require grad as made (a frozen input the program writes a
        tracked value into requires grad afterwards, but is no leaf) and the parameters."""
        found = {s.name: a for s, a in zip(self.args_specs, args) if requires_grad(s)}
        for name in self.params:
            found[name] = getattr(self.module, name)
        return found

    def run(self, callee: Callable[..., Any], backward: bool = True, retain: bool = False,
            perturb: Optional[Callable[[List[Any]], None]] = None, upcast: bool = False
            ) -> "Call":
        """Call ``callee`` on fresh inputs (``perturb`` may move their values first; ``upcast``
        makes the float ones float64 leaves of the same values), then ``backward()`` (keeping
        the graph: ``retain``)."""
        args = [self._make(s) for s in self.args_specs]
        if upcast:
            args = [_float64(a) for a in args]
        if perturb is not None:
            with self.T.no_grad():
                perturb(args)
        for name in self.params:
            getattr(self.module, name).grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = callee(*args)
            loss = backward_loss(outs, self.program.seed, self.every_output) if backward \
                else None
            if loss is not None:
                loss.backward(retain_graph=retain)
        leaves = self.leaves(args)
        grads = {n: (None if t.grad is None else t.grad.clone()) for n, t in leaves.items()}
        return Call(outs, grads, {s.name: a for s, a in zip(self.args_specs, args)}, loss, leaves)


def _float64(t: Any) -> Any:
    """A float tensor as a float64 leaf with its values and ``requires_grad``; others as is."""
    if not hasattr(t, "dtype") or dtype_name(t) not in FLOATS:
        return t
    return t.detach().double().requires_grad_(bool(t.requires_grad))


@dataclass
class Call:
    """One call: outputs, ``.grad`` per leaf (cloned), the arguments after it, its loss."""
    outs: Any
    grads: Dict[str, Any]
    args: Dict[str, Any]
    loss: Any
    leaves: Dict[str, Any]


def module_source(program: Program, params: List[str]) -> str:
    """``class Net``: ``params`` as parameters, the other inputs as ``forward``'s arguments."""
    rest = [s.name for s in program.inputs if s.name not in params]
    call = ", ".join(f"self.{s.name}" if s.name in params else s.name for s in program.inputs)
    lines = ["class Net(T.nn.Module):", "    def __init__(self, values):",
             "        super().__init__()"]
    lines += [f"        self.{n} = T.nn.Parameter(values[{n!r}])" for n in params]
    lines += [f"    def forward(self{''.join(', ' + n for n in rest)}):",
              f"        return program({call})", ""]
    return "\n".join(lines)


def check_grad(program: Program, entry: str, calls: int = 2, no_grad: bool = True) -> Outcome:
    """Compare the compiled training call through ``entry`` with eager autograd."""
    # these build on this module's Harness
    from grad_frontends import frontend_differs_too, frontend_quirk, frontend_rejects
    from grad_rounding import unless_unstable
    from tensorplay_graph.training import programs_built, programs_since
    g = replay_grad(program)
    if g is None:
        return Outcome("skip", "eager rejects the program")
    levels = Levels(g, program, entry)
    h = Harness(program, entry)
    try:
        want = h.run(h.target)
    except Exception as exc:  # noqa: BLE001 - eager's own rejection: not counted
        return Outcome("skip", f"eager raises {type(exc).__name__}: {_first(exc)}")
    quirk = frontend_quirk(program, entry)
    if quirk and quirk.startswith("skip: "):
        return Outcome("skip", quirk[6:])
    before = programs_built()
    try:
        compiled = compile_entry(entry, h.target, program.framework)
    except Exception as exc:  # noqa: BLE001
        return Outcome("crash", f"compile(): {type(exc).__name__}: {_first(exc)}")
    for call in range(1, calls + 1):
        last = call == calls
        try:
            got = h.run(compiled, retain=last)
        except Exception as exc:  # noqa: BLE001
            own = frontend_rejects(h, entry)
            if own:
                return Outcome("skip", own)
            return Outcome("crash", f"{type(exc).__name__}: {_first(exc)} (call {call})")
        why = _differs(want, got, levels)
        if why:
            own = frontend_differs_too(h, entry, want, got, levels)
            if own:
                return Outcome("skip", own)
            return unless_unstable(h, want, levels, f"{why} (call {call})", got)
        if last and got.loss is not None:
            why = _retained_backward_doubles(got)
            if why:
                return Outcome("mismatch", why)
    if no_grad and not quirk:
        why = _no_grad_call(h, compiled, want, levels)
        if why:
            return unless_unstable(h, want, levels, why)
    reasons = [p.eager_reason for p in programs_since(before) if p.eager_reason]
    return Outcome("ok", f"eager autograd: {reasons[0]}" if reasons else "")


class Levels:
    """Exactness levels (see fuzz_gen) of the outputs, the inputs and the gradients."""

    def __init__(self, g: Any, program: Program, entry: str = "reference") -> None:
        self.outputs = [g.env[o].level for o in program.outputs]
        self.inputs = {s.name: g.env[s.name].level for s in program.inputs}
        self.lowp = any(v.dtype in ("float16", "bfloat16") for v in g.env.values())
        # A gradient sums over paths (and broadcasts): rounded at least; a decision anywhere in
        # the program (a compare, a max, a relu on rounded data) may flip any gradient element.
        self.grads = max([1] + [v.level for v in g.env.values()])
        # AOTAutograd gives zeros, not None, to an input that only unused outputs reach
        # (torch.compile(backend="aot_eager") does too: FINDINGS.md)
        self.zeros_for_none = entry == "framework" and program.framework == "torch"


def _plain(t: Any, like: Any) -> Any:
    """``t`` seen as ``like``'s type when it is a parameter ``like`` is not: a program
    returning a parameter's alias gets the parameter itself (tests/fuzz/FINDINGS.md)."""
    if type(t) is not type(like) and type(t).__name__ == "Parameter" and \
            isinstance(t, type(like)):
        return t.detach() if type(t.detach()) is type(like) else t
    return t


def _differs(want: "Call", got: "Call", levels: Levels) -> Optional[str]:
    if not isinstance(got.outs, tuple) or len(got.outs) != len(want.outs):
        return f"returned {type(got.outs).__name__}, eager a tuple of {len(want.outs)}"
    for k, (w, g, lv) in enumerate(zip(want.outs, got.outs, levels.outputs)):
        why = compare(w, _plain(g, w), lv, levels.lowp)
        if why:
            return f"output {k}: {why}"
        if differentiable(w) != differentiable(g):
            return f"output {k}: requires_grad {differentiable(g)}, eager {differentiable(w)}"
    for name, w in want.grads.items():
        g = got.grads.get(name)
        if w is None and g is not None and levels.zeros_for_none and not _np(g).any():
            continue  # AOTAutograd's own: zeros for an input only unused outputs reach
        if (w is None) != (g is None):
            return (f"{name}.grad is {'None' if g is None else 'a tensor'}, eager's "
                    f"{'None' if w is None else 'a tensor'}")
        why = None if w is None else compare(w, g, levels.grads, levels.lowp)
        if why:
            return f"{name}.grad: {why}"
    for name, w in want.args.items():
        why = compare(w, got.args[name], levels.inputs[name], levels.lowp)
        if why:
            return f"input {name} after the call: {why}"
    return None


def _retained_backward_doubles(got: "Call") -> Optional[str]:
    """A second ``backward()`` of a retained graph adds the same gradients again."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got.loss.backward()
    except Exception as exc:  # noqa: BLE001
        return f"second backward of a retained graph: {type(exc).__name__}: {_first(exc)}"
    for name, leaf in got.leaves.items():
        first = got.grads[name]
        if (first is None) != (leaf.grad is None):
            return f"{name}.grad after a second backward of a retained graph: None changed"
        if first is not None:
            why = compare(first + first, leaf.grad, 0, False)
            if why:
                return f"{name}.grad after a second backward of a retained graph is not twice " \
                       f"the first: {why}"
    return None


def _no_grad_call(h: Harness, compiled: Callable[..., Any], want: "Call", levels: Levels
                  ) -> Optional[str]:
    """Under ``no_grad``: eager's outputs, requiring grad where eager's do (an input returned
    as is keeps its ``requires_grad``)."""
    try:
        with h.T.no_grad():
            eager = h.run(h.target, backward=False)
            got = h.run(compiled, backward=False)
    except Exception as exc:  # noqa: BLE001
        return f"no_grad call: {type(exc).__name__}: {_first(exc)}"
    for k, (w, e, g, lv) in enumerate(zip(want.outs, eager.outs, got.outs, levels.outputs)):
        why = compare(e, _plain(g, e), lv, levels.lowp)
        if why:
            return f"no_grad call, output {k}: {why}"
        got_rg, eager_rg = getattr(g, "requires_grad", False), getattr(e, "requires_grad", False)
        # TensorPlay 1.0.0's eager .to() / .float() / .contiguous() require grad under
        # no_grad (tests/fuzz/FINDINGS.md): not requiring it there is what no_grad means
        if got_rg != eager_rg and not (h.fw == "tensorplay" and eager_rg):
            return f"no_grad call, output {k}: requires_grad {got_rg}, eager {eager_rg}"
    return None
