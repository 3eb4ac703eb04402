"""The per-prim conformance table (in the spirit of PyTorch's OpInfo).

For every registered prim: sample calls (special values, 0-d / empty / broadcast shapes,
Python scalars on both sides, mixed dtypes) per framework and dtype. ``run_case`` captures
one program holding every sample that the framework's eager accepts, compiles it for one
backend and checks, per sample: compiled == eager (dtype exact; bitwise for bool / ints;
per-dtype tolerance and equal NaN positions for floats), and that every node the backend
did not claim carries its decline reason and sits outside that backend's regions in the
``explain()`` plan. Shared by tests/conformance (reference, TileLang C) and tests/interp
(Triton). ``TPG_CONFORMANCE_FULL=1`` runs the whole product instead of a sample.
"""

from __future__ import annotations

import hashlib
import inspect
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import tensorplay_graph as tpg
from tensorplay_graph import prims
from tensorplay_graph.passes.pipeline import compile_graph

FULL = os.environ.get("TPG_CONFORMANCE_FULL") == "1"
DTYPES = ("bool", "int32", "int64", "float32", "float16", "bfloat16")
TOLERANCE = {"float32": (1.3e-6, 1e-5), "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
             "float64": (1e-7, 1e-7)}

_FLOATS = [0.0, -0.0, 1.0, -1.5, 2.5, 0.1, -7.0, 3.0, float("nan"), float("inf"), float("-inf")]
_INTS = [0, 1, -1, 2, -3, 7, 100, -100]
SCALARS = (True, 0, -1, 3, 300, 2.5, -0.0, 70000.0, 1e-30, float("inf"), float("nan"))


_REPEAT = [1]  # run_case(repeat=k) tiles the special-value vectors (TileLang needs 8 Ki elements)

#: (prim, backend) -> the gap, for cases KNOWN_BACKEND_GAPS.md lists (left out until fixed).
KNOWN_GAPS: dict = {}  # all gaps of KNOWN_BACKEND_GAPS.md fixed (re-checked on branch fuzzfix)
#: Sample labels a slow-compiling backend runs (each sample is one kernel to build).
CORE_LABELS = ("special values", "tensor/tensor", "x op -1", "2.5 op x")


def values(dtype: str, n_huge: bool = True) -> list:
    """Special values of ``dtype``: NaN, +-inf, -0.0, 0, huge and tiny for floats."""
    return _values(dtype, n_huge) * _REPEAT[0]


def _values(dtype: str, n_huge: bool = True) -> list:
    if dtype == "bool":
        return [True, False, True, True, False, False, True, False]
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        return _INTS + ([int(info.max), int(info.min)] if n_huge else [])
    info = np.finfo("float32" if dtype == "bfloat16" else dtype)
    huge = 3e38 if dtype == "bfloat16" else float(info.max)
    return _FLOATS + ([huge, -huge, float(info.tiny)] if n_huge else [])


class Framework:
    """Tensor factory and conversions of one framework (``torch`` / ``tensorplay``)."""

    def __init__(self, name: str) -> None:
        import importlib
        self.name = name
        self.ns = importlib.import_module(name)
        self.functional = importlib.import_module(f"{name}.nn.functional")

    def tensor(self, data: Any, dtype: str) -> Any:
        return self.ns.tensor(data, dtype=getattr(self.ns, dtype))

    def empty(self, shape: tuple, dtype: str) -> Any:
        return self.ns.zeros(shape, dtype=getattr(self.ns, dtype))

    def dtype(self, t: Any) -> str:
        return str(t.dtype).rsplit(".", 1)[-1]

    def numpy(self, t: Any) -> np.ndarray:
        t = t.detach() if hasattr(t, "detach") else t
        if self.dtype(t) == "bfloat16":
            t = t.float()
        return np.asarray(t.numpy())

    def callable_of(self, prim: Any) -> Optional[Callable[..., Any]]:
        """The framework function a prim normalizes from, else its method, else its operator."""
        by_module = {f"{self.name}": self.ns, f"{self.name}.nn.functional": self.functional}
        for spelling in prim.spellings:
            module, _, name = spelling.partition(":")
            if module in by_module and hasattr(by_module[module], name):
                return getattr(by_module[module], name)
        for spelling in prim.spellings:
            module, _, name = spelling.partition(":")
            if module == "method":
                return lambda a, *rest, _n=name, **kw: getattr(a, _n)(*rest, **kw)
            if module == "operator":
                return getattr(operator, name)
        return None

    def operator_of(self, prim: Any) -> Optional[Callable[..., Any]]:
        for spelling in prim.spellings:
            module, _, name = spelling.partition(":")
            if module == "operator":
                return getattr(operator, name)
        return None


@dataclass
class Sample:
    """One call: ``fn(*tensors)`` with scalars baked in; ``label`` says what it exercises."""

    label: str
    fn: Callable[..., Any]
    tensors: Tuple[Any, ...]


# ----------------------------------------------------------------------------- samples

def _rolled(fw: Framework, dtype: str, shift: int = 3) -> Any:
    v = values(dtype)
    return fw.tensor(v[shift:] + v[:shift], dtype)


def _other_dtype(dtype: str) -> str:
    return DTYPES[(DTYPES.index(dtype) + 2) % len(DTYPES)]


def batch_norm_samples(fw: Framework, dtype: str) -> List[Sample]:
    """``batch_norm_channels`` has no framework spelling: eval-mode ``batch_norm`` becomes it."""
    x = fw.tensor(values(dtype), dtype)
    n = len(values(dtype))
    stats = [fw.tensor([0.5 * (i % 3) - 0.5 for i in range(n)], dtype),
             fw.tensor([0.25 + i % 4 for i in range(n)], dtype),
             fw.tensor([1.5 - (i % 5) for i in range(n)], dtype)]
    bn = fw.functional.batch_norm
    return [Sample("(N, C) affine", lambda a, m, v, w: bn(a, m, v, w, m, False, 0.1, 1e-3),
                   (x.reshape(1, n), *stats)),
            Sample("(N, C, L) no affine", lambda a, m, v: bn(a, m[:2], v[:2], training=False),
                   (x[:2 * (n // 2)].reshape(1, 2, n // 2), stats[0], stats[1]))]


def pointwise_samples(prim: Any, fw: Framework, dtype: str) -> List[Sample]:
    """Unary / binary samples from the prim's canonical signature; extra keywords per prim."""
    if prim.name == "batch_norm_channels":
        return batch_norm_samples(fw, dtype)
    params = list(inspect.signature(prim.signature).parameters)
    f = fw.callable_of(prim)
    x = fw.tensor(values(dtype), dtype)
    zero_d = fw.tensor(_values(dtype)[3], dtype)
    empty = fw.empty((0,), dtype)
    grid = fw.tensor(_values(dtype, n_huge=False)[:6], dtype).reshape(2, 3)
    out = [Sample("special values", lambda a: f(a), (x,)),
           Sample("0-d", lambda a: f(a), (zero_d,)),
           Sample("empty", lambda a: f(a), (empty,)),
           Sample("non-contiguous", lambda a: f(a), (grid.transpose(0, 1),))]
    if prim.name == "cast":
        return [Sample(f"{s.label} -> {to}", (lambda a, _t=to: f(a, getattr(fw.ns, _t))), s.tensors)
                for s in out for to in DTYPES]
    if params[:2] != ["a", "b"] and prim.name not in ("where", "clamp"):
        return out
    if prim.name == "where":
        cond = fw.tensor([bool(i % 3) for i in range(len(values(dtype)))], "bool")
        out = [Sample("tensor/tensor", lambda c, a, b: f(c, a, b), (cond, x, _rolled(fw, dtype))),
               Sample("broadcast", lambda c, a: f(c, a, zero_d), (cond[:4].reshape(4, 1), x[:3]))]
        return out + [Sample(f"scalar {s!r}", lambda c, a, _s=s: f(c, a, _s), (cond, x)) for s in SCALARS]
    if prim.name == "clamp":
        return [Sample(f"min {lo!r} max {hi!r}", lambda a, _l=lo, _h=hi: f(a, _l, _h), (x,))
                for lo, hi in ((-1, 2), (None, 0.5), (-2.5, None), (True, 300))]
    y = _rolled(fw, dtype)
    out = [Sample("tensor/tensor", lambda a, b: f(a, b), (x, y)),
           Sample("broadcast (4,1)x(3,)", lambda a, b: f(a, b),
                  (x[:4].reshape(4, 1), y[:3])),
           Sample("0-d operand", lambda a, b: f(a, b), (x, zero_d)),
           Sample("empty", lambda a, b: f(a, b), (empty, empty)),
           Sample(f"mixed dtype {_other_dtype(dtype)}", lambda a, b: f(a, b),
                  (x, fw.tensor(values(_other_dtype(dtype))[:len(values(dtype))], _other_dtype(dtype))))]
    op = fw.operator_of(prim) or f
    out += [Sample(f"x op {s!r}", lambda a, _s=s: f(a, _s), (x,)) for s in SCALARS]
    out += [Sample(f"{s!r} op x", lambda a, _s=s: op(_s, a), (x,)) for s in SCALARS]
    for key, options in _EXTRA_KWARGS.get(prim.name, {}).items():
        out += [Sample(f"{key}={v!r}", lambda a, b, _k=key, _v=v: f(a, b, **{_k: _v}), (x, y))
                for v in options]
    return out


_EXTRA_KWARGS = {"add": {"alpha": (2, 0.5)}, "sub": {"alpha": (2, -0.5)},
                 "div": {"rounding_mode": ("floor", "trunc")}}
_UNARY_KWARGS = {"gelu": ({}, {"approximate": "tanh"})}


def cross_entropy_samples(fw: Framework, dtype: str) -> List[Sample]:
    """``cross_entropy_rows`` has no framework spelling: torch's ``F.cross_entropy`` with
    class-index targets decomposes into it (TensorPlay's stays the framework call)."""
    if fw.name != "torch":
        return []
    x = fw.tensor(values(dtype, n_huge=False)[:8], dtype).reshape(2, 4)
    t = fw.ns.tensor([3, -100])
    ce = fw.functional.cross_entropy
    return [Sample("rows", lambda a, b: ce(a, b, reduction="none"), (x, t)),
            Sample("mean, ignore_index=2", lambda a, b: ce(a, b, ignore_index=2),
                   (x.flip(1), fw.ns.tensor([1, 2])))]


def reduction_samples(prim: Any, fw: Framework, dtype: str) -> List[Sample]:
    if prim.name == "cross_entropy_rows":
        return cross_entropy_samples(fw, dtype)
    f = fw.callable_of(prim)
    grid = fw.tensor(values(dtype, n_huge=False)[:8], dtype).reshape(2, 4)
    zero_d = fw.tensor(_values(dtype)[2], dtype)
    calls = [("all", grid, {}), ("dim=0", grid, {"dim": 0}), ("dim=-1 keepdim", grid, {"dim": -1, "keepdim": True}),
             ("dims (0,1)", grid, {"dim": (0, 1)}), ("0-d dim=0", zero_d, {"dim": 0}),
             ("0-d dim=-1", zero_d, {"dim": -1}), ("0-d all", zero_d, {}),
             ("empty rows dim=0", fw.empty((0, 3), dtype), {"dim": 0})]
    if prim.name == "sum":
        calls.append(("dtype=float32", grid, {"dtype": getattr(fw.ns, "float32")}))
    return [Sample(label, (lambda a, _kw=kw: f(a, **_kw)), (t,)) for label, t, kw in calls]


def norm_samples(prim: Any, fw: Framework, dtype: str) -> List[Sample]:
    if fw.name == "tensorplay" and not dtype.startswith("float"):
        return []  # TensorPlay 1.0's softmax on bool / int tensors segfaults (eager itself)
    f = fw.callable_of(prim)
    x = fw.tensor(values(dtype, n_huge=False)[:8], dtype).reshape(2, 4)
    if prim.name in ("softmax", "log_softmax"):
        return [Sample("dim=-1", lambda a: f(a, dim=-1), (x,)), Sample("dim=0", lambda a: f(a, dim=0), (x,))]
    w = fw.tensor([0.5, 1.0, -2.0, 3.0], dtype)
    return [Sample("no weight", lambda a: f(a, (4,)), (x,)), Sample("weight", lambda a, b: f(a, (4,), b), (x, w))]


def matmul_samples(prim: Any, fw: Framework, dtype: str) -> List[Sample]:
    f = fw.callable_of(prim)
    a = fw.tensor([[1, 2, 0], [-1, 3, 2]], dtype)
    b = fw.tensor([[1, 0], [2, -1], [0, 3]], dtype)
    if prim.name == "linear":
        return [Sample("x @ w.T + b", lambda x, w: f(x, w), (a, b.transpose(0, 1)))]
    if prim.name == "bmm":
        return [Sample("batched", lambda x, y: f(x, y), (a.reshape(1, 2, 3), b.reshape(1, 3, 2)))]
    if prim.name == "addmm":
        c = fw.tensor([[1, 1], [0, 2]], dtype)
        return [Sample("c + a @ b", lambda z, x, y: f(z, x, y), (c, a, b))]
    return [Sample("2-d", lambda x, y: f(x, y), (a, b))]


def view_samples(prim: Any, fw: Framework, dtype: str) -> List[Sample]:
    x = fw.tensor(values(dtype, n_huge=False)[:6], dtype).reshape(2, 3)
    calls = {"reshape": lambda a: a.reshape(3, 2), "view": lambda a: a.view(6),
             "permute": lambda a: a.permute(1, 0), "transpose": lambda a: a.transpose(0, 1),
             "unsqueeze": lambda a: a.unsqueeze(0), "squeeze": lambda a: a.unsqueeze(1).squeeze(1),
             "expand": lambda a: a[:1].expand(4, 3), "contiguous": lambda a: a.transpose(0, 1).contiguous(),
             "getitem": lambda a: a[1], "flatten": lambda a: a.unsqueeze(0).flatten(1),
             "narrow": lambda a: a.narrow(1, 1, 2)}
    return [Sample(prim.name, calls[prim.name], (x,))] if prim.name in calls else []


def gather_samples(prim: Any, fw: Framework, dtype: str) -> List[Sample]:
    f = fw.callable_of(prim)
    x = fw.tensor(values(dtype, n_huge=False)[:6], dtype).reshape(2, 3)
    return [Sample("last dim, a view piece", lambda a, b: f((a, b.transpose(0, 1)), 1),
                   (x, x.reshape(3, 2))),
            Sample("first dim, three pieces", lambda a: f((a, a[:1], a), 0), (x,))]


SAMPLERS = {"pointwise": pointwise_samples, "reduction": reduction_samples, "norm": norm_samples,
            "matmul": matmul_samples, "view": view_samples, "gather": gather_samples}


def samples(prim: Any, fw: Framework, dtype: str) -> List[Sample]:
    """Samples of ``prim``; opaque prims (random, data-dependent, effects) have none: no backend
    lowers them (``test_opaque_prims_are_declined``)."""
    sampler = SAMPLERS.get(prim.kind)
    out = sampler(prim, fw, dtype) if sampler else []
    if prim.name in _UNARY_KWARGS and prim.kind == "pointwise":
        f = fw.callable_of(prim)
        out += [Sample(f"{kw}", (lambda a, _kw=kw: f(a, **_kw)), (fw.tensor(values(dtype), dtype),))
                for kw in _UNARY_KWARGS[prim.name] if kw]
    return out


# ----------------------------------------------------------------------------- running

def select(cases: List[Any], budget: int, key: Callable[[Any], str]) -> List[Any]:
    """A deterministic sample of ``budget`` cases (all of them when TPG_CONFORMANCE_FULL=1)."""
    if FULL or len(cases) <= budget:
        return list(cases)
    return sorted(cases, key=lambda c: hashlib.sha256(key(c).encode()).hexdigest())[:budget]


def _eager_ok(sample: Sample) -> Optional[Any]:
    try:
        return sample.fn(*sample.tensors)
    except Exception:  # eager rejects it: the case does not count
        return None


def compare(fw: Framework, got: Any, want: Any) -> Optional[str]:
    """None when ``got`` equals eager's ``want``; else what differs."""
    if fw.dtype(got) != fw.dtype(want):
        return f"dtype {fw.dtype(got)} != eager {fw.dtype(want)}"
    g, w = fw.numpy(got), fw.numpy(want)
    if g.shape != w.shape:
        return f"shape {g.shape} != eager {w.shape}"
    if w.dtype.kind in "biu":
        return None if np.array_equal(g, w) else f"got {g.tolist()} eager {w.tolist()}"
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return f"NaN positions differ: got {g.tolist()} eager {w.tolist()}"
    rtol, atol = TOLERANCE[fw.dtype(want)]
    ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    return None if ok.all() else f"got {g.tolist()} eager {w.tolist()}"


def run_case(prim: Any, fw: Framework, dtype: str, backend: Any, repeat: int = 1,
             labels: Optional[Tuple[str, ...]] = None) -> Tuple[int, List[str]]:
    """Check every accepted sample of (prim, framework, dtype) on ``backend``.

    ``repeat`` tiles the value vectors; ``labels`` keeps only those samples. Returns
    (samples checked, failure messages). A crash of capture / compile / run is a failure;
    so is a node outside the backend's regions without a decline reason.
    """
    _REPEAT[0] = repeat
    try:
        made = samples(prim, fw, dtype)
    finally:
        _REPEAT[0] = 1
    made = [s for s in made if labels is None or s.label in labels]
    accepted = [(s, w) for s in made for w in [_eager_ok(s)] if w is not None]
    accepted = [(s, w) for s, w in accepted if hasattr(w, "shape")]
    if not accepted:
        return 0, []
    inputs: List[Any] = []
    slots = []
    for sample, _ in accepted:
        slots.append(range(len(inputs), len(inputs) + len(sample.tensors)))
        inputs.extend(sample.tensors)

    def run_all(*args):
        return tuple(s.fn(*[args[i] for i in slot]) for (s, _), slot in zip(accepted, slots))

    program = _named(run_all, len(inputs))

    where = f"{prim.name} [{fw.name} {dtype} on {getattr(backend, 'name', backend)}]"
    try:
        lowered = compile_graph(tpg.capture(program, *inputs), tuple(inputs), backends=[backend])
        got = lowered(*inputs)
    except Exception as exc:
        return len(accepted), [f"{where}: crashed: {type(exc).__name__}: {str(exc)[:300]}"]
    failures = [f"{where} {s.label}: {why}" for (s, want), g in zip(accepted, got)
                for why in [compare(fw, g, want)] if why]
    failures += undeclared(program, inputs, backend, where)
    return len(accepted), failures


def _named(fn: Callable, n: int) -> Callable:
    """``fn(*args)`` as a function of ``n`` named parameters (capture needs fixed inputs)."""
    params = ", ".join(f"in{i}" for i in range(n))
    namespace = {"fn": fn}
    exec(f"def program({params}):\n    return fn({params})\n", namespace)
    return namespace["program"]


def undeclared(program: Callable, inputs: List[Any], backend: Any, where: str) -> List[str]:
    """Nodes the backend neither claimed nor declined with a reason (explain's plan)."""
    name = getattr(backend, "name", backend)
    plan = tpg.explain(program, *inputs, backend=[backend], compile_kernels=False, assume_device=False)
    claimed = {n for r in plan.regions if r.backend == name for n in r.nodes}
    problems = []
    for node in plan.eager:
        reason = plan.declined.get(node, {}).get(name)
        if node in claimed or not reason:
            problems.append(f"{where}: node {node} runs eagerly but {name} gave no decline reason")
    return problems
