"""Seeded generator of random straight-line programs (3-30 ops) for torch and TensorPlay.

Generation runs each candidate statement eagerly on the framework's tensors as it goes,
so every accepted statement is valid for that framework's own semantics (its dtype
promotion, its view rules) and the generator knows each value's real shape and dtype.

Each value carries an exactness level, used by the comparison to stay free of false
alarms while still being strict where the compiled result must be exact:
0 exact (inputs, views, casts, relu/abs/where/...), 1 rounded floating point (fusion
may reassociate / contract), 2 discrete decision on rounded data (a comparison or a
floor that may flip at a tie: a few elements may differ), 3 a reduction of level 2
(only dtype and shape are checked).
"""

from __future__ import annotations

import random
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from fuzz_avoid import (inplace_disagrees, inplace_mul_ignored, tensorplay_eager_defect,
                        tensorplay_eager_would_die)
from fuzz_gen_ops import FLOATS, NarrowOps  # noqa: F401 - FLOATS: other modules read it here
from fuzz_program import (InputSpec, Program, Stmt, custom_ops, framework_modules, fuzz_module,
                          make_input)

SCALARS = ["0", "1", "-1", "2", "0.5", "-3.0", "1.5", "1e-3", "7", "300", "-0.0"]
SPECIAL_SCALARS = ["70000.0", 'float("inf")', 'float("-inf")', 'float("nan")', "0.0"]
DIM_SIZES = [1, 1, 2, 3, 4, 5, 8]
BIG_SHAPES = [(256, 256), (128, 512), (65536,), (64, 1024), (2, 128, 256)]
MAX_NUMEL = 1 << 22


def _broadcast_numel(shapes: List[Tuple[int, ...]]) -> int:
    """Elements of the shapes broadcast together (an upper bound for any op over them)."""
    rank = max((len(s) for s in shapes), default=0)
    dims = [1] * rank
    for shape in shapes:
        for i, d in enumerate(shape, rank - len(shape)):
            dims[i] = max(dims[i], d)
    total = 1
    for d in dims:
        total *= d
    return total


def dtype_name(t: Any) -> str:
    return str(t.dtype).split(".")[-1]


class Var:
    def __init__(self, value: Any, level: int, is_input: bool = False) -> None:
        self.value, self.level, self.is_input = value, level, is_input

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.value.shape)

    @property
    def dtype(self) -> str:
        return dtype_name(self.value)


class Generator(NarrowOps):
    """Builds one program; ``big`` uses 64Ki+ element float32 inputs (TileLang's CPU range)."""

    def __init__(self, seed: int, framework: str, big: bool = False, wide: bool = True) -> None:
        self.seed, self.framework, self.big, self.wide = seed, framework, big, wide
        self.rng = random.Random(seed * 7919 + (1 if framework == "torch" else 2) + (10 if big else 0))
        self.T, self.F = framework_modules(framework)
        self.ns: Dict[str, Any] = {"T": self.T, "F": self.F, **custom_ops(framework),
                                   "fuzz_mod": fuzz_module(framework)}
        self.env: Dict[str, Var] = {}
        self.inputs: List[InputSpec] = []
        self.stmts: List[Stmt] = []
        self.pending: Optional[InputSpec] = None

    # -- inputs ------------------------------------------------------------------
    def base_shape(self) -> Tuple[int, ...]:
        r = self.rng
        if self.big:
            return r.choice(BIG_SHAPES)
        if r.random() < 0.06:
            return ()
        shape = [r.choice(DIM_SIZES) for _ in range(r.randint(1, 3))]
        if r.random() < 0.07:
            shape[r.randrange(len(shape))] = 0
        return tuple(shape)

    def new_input(self, shape: Tuple[int, ...], dtype: Optional[str] = None) -> InputSpec:
        r = self.rng
        if dtype is None:
            dtype = "float32" if self.big and r.random() < 0.85 else r.choice(
                ["float32"] * 5 + ["float16", "bfloat16", "int32", "int32", "bool"])
        layout = "c"
        if len(shape) >= 2 and r.random() < 0.2:
            layout = "t"
        elif len(shape) >= 1 and r.random() < 0.12:
            layout = "s"
        special = dtype in FLOATS and r.random() < 0.3
        name = f"x{len(self.inputs) + (1 if self.pending else 0)}"
        return InputSpec(name, tuple(shape), dtype, r.randrange(1 << 30), special, layout)

    def fresh(self, shape: Tuple[int, ...], dtype: Optional[str] = None) -> str:
        """A new input for the statement being built (kept only if it is accepted)."""
        self.pending = self.new_input(shape, dtype)
        return self.pending.name

    def broadcast_partner(self, shape: Tuple[int, ...]) -> Tuple[int, ...]:
        r = self.rng
        out = [1 if r.random() < 0.35 else d for d in shape]
        drop = r.randint(0, len(out)) if r.random() < 0.3 else 0
        return tuple(out[drop:])

    def materialize(self, spec: InputSpec) -> Any:
        """The framework tensor for ``spec`` (a subclass may mark it requiring grad)."""
        return make_input(self.T, spec.shape, spec.dtype, spec.seed, spec.special, spec.layout)

    # -- statement execution --------------------------------------------------------
    def try_add(self, stmt: Stmt) -> bool:
        """Run ``stmt`` eagerly on the current values; keep it if eager accepts it."""
        shapes = [self.env[a].shape for a in stmt.args if a in self.env]
        if self.pending is not None:
            shapes.append(self.pending.shape)
        if _broadcast_numel(shapes) > MAX_NUMEL:
            return False  # (65536,) against (65536, 1) is 4G elements: eager dies of memory
        ns = dict(self.ns)
        ns.update({k: v.value for k, v in self.env.items()})
        pending = self.pending
        if pending is not None:
            ns[pending.name] = self.materialize(pending)
        self.pending = None
        if self.framework == "tensorplay" and (tensorplay_eager_would_die(
                self.T, stmt.line() if stmt.out is None else stmt.code.format(*stmt.args), ns)
                or (stmt.out is None and (inplace_mul_ignored(self.T, stmt.line(), ns)
                                          or inplace_disagrees(self.T, stmt.line(), ns)))):
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if stmt.out is None:
                    exec(stmt.line(), ns)
                else:
                    value = eval(stmt.code.format(*stmt.args), ns)
                    if not hasattr(value, "dtype") or not hasattr(value, "shape"):
                        return False
                    if self.framework == "tensorplay" and tensorplay_eager_defect(
                            self.T, stmt.code.format(*stmt.args), ns, value):
                        return False
        except Exception:  # noqa: BLE001 - eager rejected the candidate: pick another
            return False
        if pending is not None:
            self.inputs.append(pending)
            self.env[pending.name] = Var(ns[pending.name], 0, is_input=True)
        if stmt.out is None:
            if stmt.kind != "exact":  # the write may reach any alias: stay tolerant
                for var in self.env.values():
                    var.level = max(var.level, 1)
        else:
            self.env[stmt.out] = Var(value, 0)
            self.env[stmt.out].level = self.level_of(stmt.kind, stmt.args,
                                                     dtype_name(value) in FLOATS + ("float64",))
        self.stmts.append(stmt)
        return True

    def pick(self, pred=lambda v: True, prefer_intermediate: bool = False) -> Optional[str]:
        names = [k for k, v in self.env.items() if pred(v)]
        if not names:
            return None
        if prefer_intermediate:
            inter = [k for k in names if not self.env[k].is_input]
            if inter and self.rng.random() < 0.9:
                names = inter
        recent = names[-4:]
        return self.rng.choice(recent if self.rng.random() < 0.6 else names)

    def pick_with_shape(self) -> Tuple[Optional[str], Tuple[int, ...]]:
        """``(name, shape)`` of a value :meth:`pick` chose, or ``(None, ())``."""
        a = self.pick()
        return (None, ()) if a is None else (a, self.env[a].shape)

    def out_name(self) -> str:
        return f"v{len(self.stmts)}"

    def scalar(self) -> str:
        r = self.rng
        return r.choice(SPECIAL_SCALARS) if r.random() < 0.12 else r.choice(SCALARS)

    # -- op families ---------------------------------------------------------------
    def level_of(self, kind: str, args: Tuple[str, ...], out_float: bool) -> int:
        lv = max([self.env[a].level for a in args if a in self.env] or [0])
        if kind == "exact":
            return lv
        if kind == "arith":
            return max(lv, 1) if out_float else lv
        if kind == "discrete":
            return max(lv, 2) if lv >= 1 else 0
        return 3 if lv >= 2 else (max(lv, 1) if out_float else lv)  # reduce

    def emit(self, code: str, args: Tuple[str, ...], kind: str, out: bool = True) -> bool:
        return self.try_add(Stmt(self.out_name() if out else None, code, args, kind))

    FAMILIES = [("op_binary", 24), ("op_compare", 8), ("op_where", 7), ("op_unary", 14),
                ("op_cast", 8), ("op_reduce", 9), ("op_norm", 2), ("op_matmul", 3),
                ("op_view", 10), ("op_inplace", 8), ("op_custom", 2), ("op_repeat", 3)]
    BIG_FAMILIES = [("op_binary", 30), ("op_compare", 8), ("op_where", 8), ("op_unary", 16),
                    ("op_cast", 6), ("op_reduce", 3), ("op_view", 3), ("op_inplace", 4),
                    ("op_custom", 1), ("op_repeat", 3)]

    def generate(self) -> Program:
        r = self.rng
        shape = self.base_shape()
        for _ in range(r.randint(1, 3)):
            spec = self.new_input(shape if r.random() < 0.7 else self.broadcast_partner(shape))
            self.inputs.append(spec)
            self.env[spec.name] = Var(self.materialize(spec), 0, is_input=True)
        target = r.randint(3, 30)
        if self.wide:
            families = self.WIDE_BIG_FAMILIES if self.big else self.WIDE_FAMILIES
        else:
            families = self.BIG_FAMILIES if self.big else self.FAMILIES
        names, weights = zip(*families)
        attempts = 0
        while len(self.stmts) < target and attempts < target * 10:
            attempts += 1
            getattr(self, r.choices(names, weights)[0])()
        outputs = self.choose_outputs()
        meta = {"big": self.big}
        if self.wide and not self.big:
            meta["ret"] = fuzz_gen_shapes.return_form(self)
        return Program(self.framework, self.inputs, self.stmts, outputs, self.seed, meta)

    def choose_outputs(self) -> List[str]:
        """The last value produced, and a few earlier ones."""
        produced = [s.out for s in self.stmts if s.out is not None]
        outputs = produced[-1:]
        extra = [n for n in produced[:-1] if self.rng.random() < 0.15]
        return list(dict.fromkeys(extra[:2] + outputs)) or [self.inputs[0].name]


# The wide mode's extra statement kinds live in their own modules (fuzz_gen_more, _shapes).
import fuzz_gen_more  # noqa: E402
import fuzz_gen_shapes  # noqa: E402

fuzz_gen_more.register(Generator)


def generate(seed: int, framework: str, big: bool = False, wide: bool = True) -> Program:
    """Program ``seed``; ``wide=False`` is the original (narrow) generator's program."""
    return Generator(seed, framework, big, wide).generate()


def replay(program: Program, make: Callable[[int, str], Generator] = Generator
           ) -> Optional[Generator]:
    """A generator (``make(seed, framework)``) that ran ``program``'s statements eagerly
    (None: eager fails); its ``env`` holds every value with its exactness level."""
    g = make(program.seed, program.framework)
    for spec in program.inputs:
        g.inputs.append(spec)
        g.env[spec.name] = Var(g.materialize(spec), 0, is_input=True)
    for stmt in program.stmts:
        if not g.try_add(stmt):
            return None
    return g


def levels(program: Program) -> Optional[Tuple[List[int], List[int], bool]]:
    """Exactness levels of the outputs and of the inputs after the program, and whether any
    value is float16 / bfloat16, by replaying the program eagerly (None: eager fails)."""
    g = replay(program)
    if g is None:
        return None
    lowp = any(v.dtype in ("float16", "bfloat16") for v in g.env.values())
    return ([g.env[o].level for o in program.outputs],
            [g.env[i.name].level for i in program.inputs], lowp)
