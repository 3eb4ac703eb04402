"""The fuzzer's program representation: inputs, straight-line statements, Python source.

A :class:`Program` is framework-neutral text over two names, ``T`` (``torch`` or
``tensorplay``) and ``F`` (its ``nn.functional``); it becomes a real function by
``exec`` of :meth:`Program.source`. Repros are the same text plus the input
builder and the custom ops, so a failing program is a self-contained snippet.
"""

from __future__ import annotations

import copy
import inspect
import linecache
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

FRAMEWORKS = ("torch", "tensorplay")
#: Where the checks run the programs (``TPG_FUZZ_DEVICE``, e.g. ``cuda``); the generator
#: always runs them on the CPU, so a seed is the same program on every machine.
DEVICE = os.environ.get("TPG_FUZZ_DEVICE", "cpu")

#: Custom ops the programs call (one pure op, one that declares it mutates its input).
#: Exec'd by the harness and pasted into repros, so both run the same definitions.
CUSTOM_OPS_SRC = '''\
from tensorplay_graph.library import custom_op


@custom_op("fuzz::affine_{fw}", mutates_args=())
def fuzz_affine(x: T.Tensor, s: float) -> T.Tensor:
    return x * s + 1.0


@fuzz_affine.register_fake
def _(x, s):
    return T.empty_like(x)


@custom_op("fuzz::bump_{fw}", mutates_args=("x",))
def fuzz_bump_(x: T.Tensor) -> None:
    x.add_(1.0)


@fuzz_bump_.register_fake
def _(x):
    return None
'''

#: A small module the wide generator's programs call (``fuzz_mod(n)(x)``): a Linear, a
#: parameter and a buffer, with fixed values; one cached instance per width.
MODULE_SRC = '''\
_FUZZ_MODS = {}


def fuzz_mod(n: int):
    if n not in _FUZZ_MODS:
        class FuzzMod(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = T.nn.Linear(n, 3)
                w = np.linspace(-1.0, 1.0, 3 * n, dtype=np.float32).reshape(3, n)
                with T.no_grad():
                    self.lin.weight.copy_(T.from_numpy(w))
                    self.lin.bias.fill_(0.25)
                self.scale = T.nn.Parameter(T.from_numpy(np.array([1.0, -2.0, 0.5], np.float32)))
                self.register_buffer("shift", T.from_numpy(np.arange(3, dtype=np.float32)))

            def forward(self, x):
                return T.relu(self.lin(x)) * self.scale + self.shift

        _FUZZ_MODS[n] = FuzzMod().eval()
    return _FUZZ_MODS[n]
'''


def make_input(T: Any, shape: Tuple[int, ...], dtype: str, seed: int, special: bool,
               layout: str) -> Any:
    """A framework tensor: seeded values, optional NaN/inf/-0.0, optional non-contiguity.

    ``layout``: ``"c"`` contiguous, ``"t"`` last two dims transposed in memory,
    ``"s"`` every other element of a twice-as-wide last dim.
    """
    rng = np.random.default_rng(seed)
    mem = list(shape)
    if layout == "t":
        mem[-1], mem[-2] = mem[-2], mem[-1]
    elif layout == "s":
        mem[-1] *= 2
    if dtype == "bool":
        a = rng.random(mem) < 0.5
    elif dtype in ("int32", "int64"):
        a = rng.integers(-6, 7, size=mem).astype(dtype)
    else:
        a = (rng.standard_normal(mem) * 2.0).astype(np.float32)
        if special and a.size:
            picks = rng.random(mem) < 0.15
            values = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0], dtype=np.float32)
            a = np.where(picks, values[rng.integers(0, 6, size=mem)], a).astype(np.float32)
    t = T.from_numpy(np.ascontiguousarray(a))
    if dtype in ("float16", "bfloat16", "float64"):
        t = t.to(getattr(T, dtype))
    if layout == "t":
        t = t.transpose(-1, -2)
    elif layout == "s":
        t = t[..., ::2]
    return t


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: Tuple[int, ...]
    dtype: str
    seed: int
    special: bool = False
    layout: str = "c"

    def call(self) -> str:
        return (f"make_input(T, {self.shape!r}, {self.dtype!r}, {self.seed}, "
                f"{self.special}, {self.layout!r})")


@dataclass(frozen=True)
class Stmt:
    """One line: ``out = code.format(*args)``, or the bare statement when ``out`` is None."""
    out: Optional[str]
    code: str
    args: Tuple[str, ...]
    kind: str = "exact"  # exact / arith / discrete / reduce: see fuzz_gen's levels

    def line(self) -> str:
        text = self.code.format(*self.args)
        return f"{self.out} = {text}" if self.out else text


@dataclass
class Program:
    framework: str
    inputs: List[InputSpec]
    stmts: List[Stmt]
    outputs: List[str]
    seed: int = 0
    meta: Dict[str, Any] = field(default_factory=dict)

    def uses_custom_ops(self) -> bool:
        return any("fuzz_affine" in s.code or "fuzz_bump_" in s.code for s in self.stmts)

    def uses_module(self) -> bool:
        return any("fuzz_mod(" in s.code for s in self.stmts)

    def body(self) -> str:
        params = ", ".join(i.name for i in self.inputs)
        lines = [f"def program({params}):"]
        lines += ["    " + s.line() for s in self.stmts]
        outs = ", ".join(self.outputs)
        form = self.meta.get("ret", "tuple")  # the wide generator also returns these forms
        if form == "list":
            lines.append(f"    return [{outs}]")
        elif form == "dict":
            lines.append("    return {" + ", ".join(f"{o!r}: {o}" for o in self.outputs) + "}")
        elif form == "bare" and len(self.outputs) == 1:
            lines.append(f"    return {outs}")
        else:
            lines.append(f"    return ({outs},)" if len(self.outputs) == 1 else f"    return ({outs})")
        return "\n".join(lines) + "\n"

    def header(self) -> str:
        if self.framework == "torch":
            return "import torch as T\nimport torch.nn.functional as F\n"
        return "import tensorplay as T\nimport tensorplay.nn.functional as F\n"

    def inputs_source(self) -> str:
        items = ", ".join(i.call() for i in self.inputs)
        return f"def inputs():\n    return [{items}]\n"

    def without(self, index: int) -> Optional["Program"]:
        """The program without statement ``index``; later uses of its result read its
        first argument instead (None when the statement has no argument to stand in)."""
        stmt = self.stmts[index]
        rename: Dict[str, str] = {}
        if stmt.out is not None:
            if not stmt.args:
                return None
            rename[stmt.out] = stmt.args[0]
        stmts = [replace(s, args=tuple(rename.get(a, a) for a in s.args))
                 for k, s in enumerate(self.stmts) if k != index]
        outputs = list(dict.fromkeys(rename.get(o, o) for o in self.outputs))
        return replace(self, stmts=stmts, outputs=outputs, inputs=list(self.inputs))

    def pruned_inputs(self) -> "Program":
        used = {a for s in self.stmts for a in s.args} | set(self.outputs)
        return replace(self, inputs=[i for i in self.inputs if i.name in used])


def build_function(program: Program, extra: Optional[Dict[str, Any]] = None,
                   device: str = "cpu") -> Tuple[Callable[..., Any], Callable[[], list]]:
    """``(program function, fresh-inputs factory)`` exec'd from the program's source
    (``extra``: more names its statements use, e.g. further custom ops). ``device``: where the
    inputs and ``fuzz_mod``'s module live (the generator always runs on the CPU; tensors the
    program itself makes stay where its statements put them)."""
    T, F = framework_modules(program.framework)
    place = (lambda t: t) if device == "cpu" else (lambda t: t.to(device))
    namespace: Dict[str, Any] = {"T": T, "F": F, "np": np,
                                 "make_input": lambda *a: place(make_input(*a))}
    if program.uses_custom_ops():
        namespace.update(custom_ops(program.framework))
    if program.uses_module():
        namespace["fuzz_mod"] = fuzz_module(program.framework, device)
    namespace.update(extra or {})
    source = program.body()
    filename = f"<fuzz-program-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    exec(program.inputs_source(), namespace)
    return namespace["program"], namespace["inputs"]


_CUSTOM_OPS: Dict[str, Dict[str, Any]] = {}


def custom_ops(framework: str) -> Dict[str, Any]:
    """The fuzz custom ops for ``framework``, defined once per process."""
    if framework not in _CUSTOM_OPS:
        T, _ = framework_modules(framework)
        ns: Dict[str, Any] = {"T": T}
        exec(CUSTOM_OPS_SRC.format(fw=framework), ns)
        _CUSTOM_OPS[framework] = {"fuzz_affine": ns["fuzz_affine"], "fuzz_bump_": ns["fuzz_bump_"]}
    return _CUSTOM_OPS[framework]


_MODULES: Dict[str, Any] = {}


def fuzz_module(framework: str, device: str = "cpu") -> Any:
    """The ``fuzz_mod`` factory for ``framework`` on ``device``, defined once per process."""
    if framework not in _MODULES:
        T, _ = framework_modules(framework)
        ns: Dict[str, Any] = {"T": T, "np": np}
        exec(MODULE_SRC, ns)
        _MODULES[framework] = ns["fuzz_mod"]
    if device == "cpu":
        return _MODULES[framework]
    key = f"{framework}:{device}"
    if key not in _MODULES:
        moved: Dict[int, Any] = {}
        make = _MODULES[framework]

        def on_device(n: int) -> Any:
            if n not in moved:  # a copy: the generator keeps the CPU module in this process
                moved[n] = copy.deepcopy(make(n)).to(device)
            return moved[n]
        _MODULES[key] = on_device
    return _MODULES[key]


def as_tuple(result: Any) -> tuple:
    """A program's outputs as a tuple, whatever its return form (tuple, list, dict, tensor)."""
    if isinstance(result, dict):
        return tuple(result.values())
    if isinstance(result, (tuple, list)):
        return tuple(result)
    return (result,)


def same_form(want: Any, got: Any) -> bool:
    """Whether ``got`` has eager's container type (and dict keys, in order)."""
    if type(got) is not type(want) and not (hasattr(got, "dtype") and hasattr(want, "dtype")):
        return False
    return not isinstance(want, dict) or list(got) == list(want)


def framework_modules(framework: str) -> Tuple[Any, Any]:
    if framework == "torch":
        import torch
        return torch, torch.nn.functional
    import tensorplay
    return tensorplay, tensorplay.nn.functional


def device_source() -> str:
    """Repro text after ``make_input``: ``DEVICE`` and, off the CPU, inputs moved there."""
    text = f"DEVICE = {DEVICE!r}\n\n\n"
    if DEVICE != "cpu":
        text += ("_make_cpu_input = make_input\n\n\n"
                 "def make_input(*args):\n    return _make_cpu_input(*args).to(DEVICE)\n\n\n")
    return text


def repro_source(program: Program, backend: str, note: str = "") -> str:
    """A self-contained Python snippet: definitions, the program, eager vs compiled."""
    parts = [f"# fuzz repro: framework={program.framework} backend={backend} "
             f"seed={program.seed}\n"]
    if note:
        parts += ["".join(f"# {line}\n" for line in note.strip().splitlines())]
    parts += ["from typing import Any, Tuple\n\nimport numpy as np\n", program.header(),
              "import tensorplay_graph as tpg\n\n\n"]
    if program.uses_custom_ops():
        parts += [CUSTOM_OPS_SRC.format(fw=program.framework), "\n\n"]
    if program.uses_module():
        parts += [MODULE_SRC, "\n\n"]
    parts += [inspect.getsource(make_input), "\n\n", device_source(), inspect.getsource(as_tuple), "\n\n",
              program.inputs_source(), "\n\n",
              program.body(), "\n\n",
              "expected = as_tuple(program(*inputs()))\n",
              f"got = as_tuple(tpg.compile(program, backend={backend!r})(*inputs()))\n",
              "for e, g in zip(expected, got):\n",
              "    print(e.dtype, g.dtype, tuple(e.shape), tuple(g.shape))\n",
              "    print(e)\n    print(g)\n"]
    return re.sub(r"\n{4,}", "\n\n\n", "".join(parts))
