"""Run one zoo cell (model x entry point x mode x backend) against the model's own eager run.

A cell compiles the model through one entry point and compares every tensor of its output
with eager, twice: in ``no_grad`` mode on a second call, in ``grad`` mode after the gradients
of a scalar loss w.r.t. every parameter (compared too) took one in-place SGD step (the
compiled model must read parameters at call time). Output types are compared too: a
``ModelOutput`` must come back as a ``ModelOutput``. Models stay in eval mode in both modes
(dropout off, batch-norm statistics frozen), so a difference is the compiler's.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .rounding import Float64Reference, within_rounding
from .zoo import ModelSpec

RTOL, ATOL = 1e-4, 1e-5


class Mismatch(AssertionError):
    """Compiled results differ from eager (values, structure or type)."""


class EagerError(RuntimeError):
    """The model itself failed eagerly: a zoo bug, not a compiler one."""


@dataclass
class CellResult:
    """What one cell did: ``error`` is None when compiled == eager."""

    max_error: Optional[float] = None
    first_call_s: Optional[float] = None  # wall clock
    first_call_cpu_s: Optional[float] = None  # this process's CPU time (robust on a busy machine)
    graph_breaks: Optional[int] = None
    error: Optional[BaseException] = None
    compiled: Any = None  # the compiled callable, for inspection (benchmarks)
    skipped: str = ""  # why the cell did not run (ModelSpec.skip_grad)
    rounding: List[str] = field(default_factory=list)  # past tolerance, within float32 rounding

    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        return "ok" if self.error is None else type(self.error).__name__


# -- framework helpers -----------------------------------------------------------------
def _fw(framework: str):
    if framework == "torch":
        import torch
        return torch
    import tensorplay
    return tensorplay


def _is_tensor(value: Any) -> bool:
    module = type(value).__module__.split(".")[0]
    return module in ("torch", "tensorplay") and hasattr(value, "shape") and hasattr(value, "dtype")


def _numpy(t: Any):
    import numpy as np
    t = t.detach()
    if type(t).__module__.startswith("torch"):
        return t.cpu().numpy()
    return np.asarray(t.numpy())


def leaves(value: Any, path: str = "out") -> List[Tuple[str, Any]]:
    """(path, tensor) pairs of a nested output; dict-like outputs by key, sequences by index."""
    if _is_tensor(value):
        return [(path, value)]
    if hasattr(value, "keys") and hasattr(value, "__getitem__"):
        return [pair for key in value.keys() for pair in leaves(value[key], f"{path}.{key}")]
    if isinstance(value, (tuple, list)):
        return [pair for i, v in enumerate(value) for pair in leaves(v, f"{path}[{i}]")]
    return []


def compare(expected: Any, actual: Any, what: str, rtol: float = RTOL, atol: float = ATOL) -> float:
    """Max abs difference; raises :class:`Mismatch` on a type, structure or value difference."""
    import numpy as np
    if type(actual) is not type(expected):
        raise Mismatch(f"{what}: compiled returned {type(actual).__qualname__}, "
                       f"eager returns {type(expected).__qualname__}")
    exp, act = leaves(expected, what), leaves(actual, what)
    if [p for p, _ in exp] != [p for p, _ in act]:
        raise Mismatch(f"{what}: output structure differs: eager {[p for p, _ in exp]}, "
                       f"compiled {[p for p, _ in act]}")
    worst = 0.0
    for (path, e), (_, a) in zip(exp, act):
        e_np, a_np = _numpy(e), _numpy(a)
        if e_np.shape != a_np.shape or e_np.dtype != a_np.dtype:
            raise Mismatch(f"{path}: compiled {a_np.dtype}{list(a_np.shape)}, "
                           f"eager {e_np.dtype}{list(e_np.shape)}")
        if e_np.size == 0:
            continue
        if e_np.dtype.kind in "fc":
            diff = float(np.max(np.abs(e_np.astype(np.float64) - a_np.astype(np.float64))))
            if not np.allclose(a_np, e_np, rtol=rtol, atol=atol, equal_nan=True):
                raise Mismatch(f"{path}: max abs error {diff:.3g} exceeds rtol={rtol}, atol={atol}")
            worst = max(worst, diff)
        elif not np.array_equal(e_np, a_np):
            raise Mismatch(f"{path}: integer/bool values differ from eager")
    return worst


def _loss(fw: Any, output: Any) -> Any:
    """A scalar that depends on every floating output."""
    terms = [(t * t).mean() for _, t in leaves(output) if t.dtype.is_floating_point]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _grads(model: Any) -> Dict[str, Any]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _sgd_step(fw: Any, model: Any, lr: float = 0.1) -> None:
    with fw.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.sub_(p.grad * lr)
                p.grad = None


def _zero_grads(model: Any) -> None:
    for p in model.parameters():
        p.grad = None


# -- entry points ----------------------------------------------------------------------
def compile_with(spec: ModelSpec, entry: str, backend: str, model: Any) -> Any:
    """``model`` compiled through ``entry`` ("dynamo", "tpg" or "tp") with ``backend``."""
    options = {} if backend == "auto" else {"backends": [backend]}
    if entry == "dynamo":
        import torch
        torch._dynamo.reset()  # a fresh cache per cell: no recompile-limit fallback to eager
        return torch.compile(model, backend="tensorplay_graph", options=options)
    if entry == "tpg":
        import tensorplay_graph as tpg
        return tpg.compile(model, options=options)
    if entry == "tp":
        import tensorplay as tp
        return tp.compile(model, backend="tensorplay_graph", options=options)
    raise ValueError(f"unknown entry point {entry!r}; use dynamo, tpg or tp")


@contextlib.contextmanager
def _dynamo_counters(entry: str, result: CellResult):
    if entry != "dynamo":
        yield
        return
    from torch._dynamo.utils import counters
    counters.clear()
    yield
    result.graph_breaks = sum(counters["graph_break"].values())
    if not counters["stats"]["unique_graphs"]:
        raise Mismatch("Dynamo compiled no graph: the model ran eagerly, "
                       "tensorplay_graph never ran")


#: float32 tolerances on a GPU: generated kernels sum in another order than eager's (rows
#: split over lanes and programs), and cuBLAS picks its algorithm by layout
GPU_RTOL, GPU_ATOL = 1e-3, 1e-4


def run_cell(spec: ModelSpec, entry: str, mode: str, backend: str,
             device: str = "cpu") -> CellResult:
    """Compile ``spec`` and compare it with eager; every failure lands in ``result.error``.
    ``device``: where the model and its inputs run (a torch device for torch models)."""
    result = CellResult()
    if mode == "grad" and spec.skip_grad:
        result.skipped = spec.skip_grad
        return result
    try:
        _run(spec, entry, mode, backend, result, device)
    except Exception as exc:  # noqa: BLE001 - the table records any failure's class
        result.error = exc
    return result


def _to(value: Any, device: str) -> Any:
    if _is_tensor(value):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    return value


def _run(spec: ModelSpec, entry: str, mode: str, backend: str, result: CellResult,
         device: str = "cpu") -> None:
    fw = _fw(spec.framework)
    model, args, kwargs = spec.build()
    if device != "cpu":
        model, args, kwargs = model.to(device), _to(args, device), _to(kwargs, device)
    tolerances = {} if device == "cpu" else {"rtol": GPU_RTOL, "atol": GPU_ATOL}
    grad = mode == "grad"
    reference = Float64Reference(spec, grad, device, _loss)

    def close(expected: Any, actual: Any, what: str) -> float:
        try:
            return compare(expected, actual, what, **tolerances)
        except Mismatch:
            exact = reference.value(what) if what == "output" or what.startswith("grad[") \
                else None
            difference = None if exact is None else within_rounding(
                expected, actual, exact, tolerances.get("atol", ATOL))
            if difference is None:
                raise
            result.rounding.append(what)
            return difference
    context = fw.enable_grad if grad else fw.no_grad
    try:
        with context():
            expected = model(*args, **kwargs)
            if grad:
                _loss(fw, expected).backward()
                expected_grads = _grads(model)
                _zero_grads(model)
    except Exception as exc:
        raise EagerError(f"{spec.name} fails eagerly: {type(exc).__name__}: {exc}") from exc
    compiled = result.compiled = compile_with(spec, entry, backend, model)
    worst = 0.0
    with context(), _dynamo_counters(entry, result):
        start, start_cpu = time.perf_counter(), time.process_time()
        actual = compiled(*args, **kwargs)
        result.first_call_s = time.perf_counter() - start
        result.first_call_cpu_s = time.process_time() - start_cpu
        worst = close(expected, actual, "output")
        if grad:
            _loss(fw, actual).backward()
            got = _grads(model)
            missing = sorted(set(expected_grads) - set(got))
            if missing:
                raise Mismatch(f"no gradient reached {len(missing)} parameters, e.g. {missing[:3]}")
            for name, g in expected_grads.items():
                worst = max(worst, close(g, got[name], f"grad[{name}]"))
            # A training step: the next call must read the updated parameters, not copies
            # taken at capture.
            _sgd_step(fw, model)
            worst = max(worst, close(model(*args, **kwargs), compiled(*args, **kwargs),
                                     "output after an SGD step"))
        else:
            worst = max(worst, close(expected, compiled(*args, **kwargs), "second call"))
    result.max_error = worst


def check(spec: ModelSpec, entry: str, mode: str, backend: str) -> CellResult:
    """:func:`run_cell` for tests: re-raises the cell's failure with its cell named."""
    result = run_cell(spec, entry, mode, backend)
    if result.error is not None:
        raise AssertionError(f"{spec.name} / {entry} / {mode} / {backend}: "
                             f"{type(result.error).__name__}: {result.error}") from result.error
    return result
