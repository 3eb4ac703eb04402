"""What the frameworks' own compile frontends get wrong, so that the gradient fuzzer does not
count it against us: ``tp.compile``'s graph quirks (TensorPlay 1.0.0, with any backend, its
default one too), programs ``torch.compile`` rejects or differentiates differently with its own
trivial backend (``aot_eager``). Each is a classified skip in :func:`grad_check.check_grad`,
never a pass: our own entry points are checked on the same programs.
"""

from __future__ import annotations

import re
import warnings
from typing import Dict, Optional, Tuple

from fuzz_check import _first
from fuzz_program import Program
from grad_check import Call, Harness, Levels, _differs


def frontend_rejects(h: Harness, entry: str) -> Optional[str]:
    """Why the framework's compile frontend without a compiler fails on the program too
    (:func:`_own_frontend_run`), or None: then the failure is not ours. Seed 100840360: Dynamo's fake tensors reject ``log_softmax`` of an empty bool
    tensor, which eager computes."""
    if entry != "framework":
        return None
    name, _, exc = _own_frontend_run(h)
    return None if exc is None else f"{name} fails too: {type(exc).__name__}: {_first(exc)}"


def frontend_differs_too(h: Harness, entry: str, want: "Call", got: "Call",
                         levels: "Levels") -> Optional[str]:
    """Why a framework-entry result that differs from eager is the frontend's own, or None:
    the frontend's graph run without a compiler (``torch.compile(backend="aot_eager")``; for
    ``tp.compile``, its graph run as is) differs from eager too and returns what we return.
    Seed 100890080 (torch): ``prod``'s backward traced through fake tensors takes torch's
    zero-safe formula (``-inf`` / ``inf`` for ``x * inf``), eager's ``result / input`` gives
    NaN. Seed 100970632 (TensorPlay): ``tp.compile``'s graph spells ``F.silu(x)`` as
    ``x * (1 / (1 + exp(-x)))``, whose product rule gives ``inf * 0 = NaN`` where eager's silu
    backward gives +-inf."""
    if entry != "framework":
        return None
    name, own, exc = _own_frontend_run(h)
    if exc is not None:  # then it says nothing about ours
        return None
    differs = _differs(want, own, levels)
    if differs and _differs(own, got, levels) is None:
        return f"{name} differs from eager the same way: {differs}"
    return None


def _own_frontend_run(h: Harness) -> Tuple[str, Optional[Call], Optional[BaseException]]:
    """The program through the framework's compile frontend without a compiler
    (``torch.compile(backend="aot_eager")`` with fresh Dynamo caches; ``tp.compile`` with a
    backend returning its graph as is): its name, the call, or the exception it raised."""
    if h.fw == "torch":
        import torch
        torch._dynamo.reset()
        own = torch.compile(h.target, backend="aot_eager", dynamic=False)
        name = 'torch.compile(backend="aot_eager")'
    else:
        import tensorplay
        own = tensorplay.compile(h.target, backend=lambda gm, inputs, **options: gm)
        name = "tp.compile (its graph run as is)"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return name, h.run(own), None
    except Exception as exc:  # noqa: BLE001
        return name, None, exc
    finally:
        if h.fw == "torch":
            torch._dynamo.reset()


def frontend_quirk(program: Program, entry: str) -> Optional[str]:
    """What TensorPlay 1.0.0's own ``tp.compile`` frontend gets wrong for ``program`` (with
    any backend, its default one too; tests/fuzz/FINDINGS.md): around in-place writes --
    its first call runs the program three times on the caller's tensors, and its graph
    merges two equal calls though one is written afterwards ("skip: ..."); and it does not
    guard on grad mode, so a ``no_grad`` call reuses the training graph (its outputs require
    grad): no ``no_grad`` check there."""
    if entry != "framework" or program.framework != "tensorplay":
        return None
    if any(s.out is None for s in program.stmts):
        return "skip: tp.compile mishandles in-place writes (runs them 3 times, CSE across them)"
    calls = [(s.code, s.args) for s in program.stmts if "fuzz_gaffine" in s.code]
    if len(set(calls)) < len(calls):
        # seed 99830392: two equal calls become one, and the fuzz op's registered backward
        # (``grad * s + x * 0.125``, not linear in grad) counts its second term once; the
        # same with TensorPlay's own default backend
        return "skip: tp.compile merges equal custom-op calls (CSE)"
    if _scalar_twins(program):
        # seed 99990776: ``0 - x0`` and ``-0.0 - x0`` on a bool x0 become one node in
        # tp.compile's graph (Python's 0 == -0.0), so the float result is the int one
        return "skip: tp.compile merges calls whose scalars compare equal (0 / -0.0, 1 / 1.0)"
    if any(_IDENTITY.match(s.code) for s in program.stmts if s.out is not None):
        # seeds 100730024, 100780424: ``x - 0.0`` / ``x - -0.0`` on an int or bool x is
        # dropped from tp.compile's graph as an identity, so eager's float promotion is lost
        return "skip: tp.compile drops scalar identities (x - 0.0, x * 1.0) that promote ints"
    return "no grad-mode guard in tp.compile"


_IDENTITY = re.compile(r"^\(\{\d+\} (?:[-+] -?0\.0|[*/] 1\.0)\)$")
_NUMBER = re.compile(r"(?<![\w{.])-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w}])|\b(?:True|False)\b")


def _scalar_twins(program: Program) -> bool:
    """Two statements that differ only in scalars that compare equal in Python (``0`` /
    ``-0.0`` / ``0.0``, ``1`` / ``1.0`` / ``True``)."""
    def number(text: str) -> float:
        return {"True": 1.0, "False": 0.0}.get(text) if text in ("True", "False") else float(text)
    seen: Dict[Tuple[str, tuple, tuple], set] = {}
    for s in program.stmts:
        if s.out is None:
            continue
        literals = _NUMBER.findall(s.code)
        key = (_NUMBER.sub("#", s.code), tuple(number(t) for t in literals), tuple(s.args))
        spellings = seen.setdefault(key, set())
        spellings.add(tuple(literals))
        if len(spellings) > 1:
            return True
    return False
