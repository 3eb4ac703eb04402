"""Seeded generator of random differentiable straight-line programs (the gradient fuzzer).

It is the forward generator (:mod:`fuzz_gen`) with float inputs that require grad, so
each statement it keeps is one eager autograd accepts while recording (an in-place write
into a leaf that requires grad is rejected as eager rejects it), reweighted towards
differentiable ops, plus ``cat`` / ``stack`` / ``split`` / ``chunk``, ``layer_norm`` with
weight and bias, and a custom op with ``register_autograd`` whose registered backward is
deliberately NOT its kernel's derivative (gradients equal to eager prove the registered
formula ran). A program whose eager backward fails (an in-place write into a value saved
for backward) is regenerated from the next attempt of the same seed.

Which inputs require grad and which become module parameters is derived from each input's
own seed, so replaying a program (:func:`fuzz_gen.replay`) needs no extra state.
"""

from __future__ import annotations

import random
import warnings
from typing import Any, Dict, List, Optional

from fuzz_avoid import statistics_of_offset_rows
from fuzz_gen import FLOATS, Generator, replay
from fuzz_program import InputSpec, Program, build_function, framework_modules

#: A custom op whose registered backward (g * s + x / 8) is not the kernel's derivative (g * s).
GRAD_OPS_SRC = '''\
from tensorplay_graph.library import custom_op


@custom_op("fuzz::gaffine_{fw}", mutates_args=())
def fuzz_gaffine(x: T.Tensor, s: float) -> T.Tensor:
    return x * s + 1.0


@fuzz_gaffine.register_fake
def _(x, s):
    return T.empty_like(x)


def _gaffine_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.s = inputs[1]


def _gaffine_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * ctx.s + x * 0.125, None


fuzz_gaffine.register_autograd(_gaffine_backward, setup_context=_gaffine_setup)
'''

_GRAD_OPS: Dict[str, Dict[str, Any]] = {}


def grad_ops(framework: str) -> Dict[str, Any]:
    """The gradient fuzzer's custom ops for ``framework``, defined once per process."""
    if framework not in _GRAD_OPS:
        T, _ = framework_modules(framework)
        ns: Dict[str, Any] = {"T": T}
        exec(GRAD_OPS_SRC.format(fw=framework), ns)
        _GRAD_OPS[framework] = {"fuzz_gaffine": ns["fuzz_gaffine"]}
    return _GRAD_OPS[framework]


def requires_grad(spec: InputSpec) -> bool:
    """Float inputs require grad, except one in seven (a frozen input: mixed programs)."""
    return spec.dtype in FLOATS and spec.seed % 7 != 0


def make_grad_input(T: Any, spec: InputSpec, device: str = "cpu") -> Any:
    from fuzz_program import make_input
    t = make_input(T, spec.shape, spec.dtype, spec.seed, spec.special, spec.layout)
    t = t if device == "cpu" else t.to(device)
    return t.requires_grad_(True) if requires_grad(spec) else t


class GradGenerator(Generator):
    """The forward generator, on inputs that require grad; ``attempt`` re-rolls a seed."""

    def __init__(self, seed: int, framework: str, attempt: int = 0) -> None:
        # The narrow statement set: the wide mode's return forms (bare / list / dict) and its
        # integer-valued ops are checked by the forward fuzzer; the gradient checker compares
        # a list of differentiable outputs.
        super().__init__(seed, framework, wide=False)
        salt = 100 + (1 if framework == "torch" else 2) + 1009 * attempt
        self.rng = random.Random(seed * 7919 + salt)
        self.ns.update(grad_ops(framework))

    def materialize(self, spec: InputSpec) -> Any:
        return make_grad_input(self.T, spec)

    def try_add(self, stmt) -> bool:
        if self.framework != "torch" and stmt.out is None and any(
                getattr(self.env[a].value, "requires_grad", False)
                for a in stmt.args if a in self.env):
            # TensorPlay 1.0.0's eager autograd loses in-place writes into (or from) values it
            # tracks -- zero_, fill_, setitem, copy_, clamp_, mul_(t): wrong eager gradients
            # (tests/fuzz/FINDINGS.md), so there is no eager answer to compare with.
            return False
        return super().try_add(stmt)

    def new_input(self, shape, dtype=None) -> InputSpec:
        if dtype is None:
            dtype = self.rng.choice(["float32"] * 7 + ["float16", "bfloat16", "int32", "bool"])
        spec = super().new_input(shape, dtype)
        if spec.special and self.rng.random() < 0.6:  # NaN / inf make most gradients NaN
            spec = InputSpec(spec.name, spec.shape, spec.dtype, spec.seed, False, spec.layout)
        return spec

    def op_cast(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        target = self.rng.choice(FLOATS * 4 + ("int32", "bool"))
        code = self.rng.choice([{"float32": "{0}.float()", "float16": "{0}.half()",
                                 "bfloat16": "{0}.bfloat16()", "int32": "{0}.int()",
                                 "bool": "{0}.bool()"}[target], f"{{0}}.to(T.{target})"])
        return self.emit(code, (a,), "discrete" if target in ("int32", "bool") else "exact")

    def op_cat(self) -> bool:
        """``cat`` / ``stack`` of two values of one shape (an input of it, often)."""
        r = self.rng
        a = self.pick(lambda v: len(v.shape) >= 1)
        if a is None:
            return False
        shape, nd = self.env[a].shape, len(self.env[a].shape)
        b = self.pick(lambda v: v.shape == shape and r.random() < 0.5)
        if b is None:
            cut = list(shape)
            d = r.randrange(nd)
            cut[d] = r.choice([1, 2, 3])
            b = self.fresh(tuple(cut) if r.random() < 0.5 else shape, self.env[a].dtype)
            dim = d - nd if r.random() < 0.5 else d
        else:
            dim = r.randrange(-nd, nd)
        code = r.choice([f"T.cat([{{0}}, {{1}}], dim={dim})", f"T.cat([{{1}}, {{0}}, {{1}}], dim={dim})",
                         f"T.stack([{{0}}, {{1}}], dim={r.randrange(nd + 1)})"])
        return self.emit(code, (a, b), "exact")

    def op_split(self) -> bool:
        r = self.rng
        a = self.pick(lambda v: len(v.shape) >= 1 and max(v.shape) >= 2)
        if a is None:
            return False
        shape = self.env[a].shape
        d = r.choice([i for i, n in enumerate(shape) if n >= 2])
        k = r.randint(1, shape[d] - 1)
        code = r.choice([f"T.split({{0}}, {k}, dim={d})[{r.choice([0, -1])}]",
                         f"{{0}}.chunk(2, dim={d})[{r.choice([0, 1]) if shape[d] > 1 else 0}]",
                         f"{{0}}.split([{k}, {shape[d] - k}], dim={d})[1]",
                         f"{{0}}.narrow({d}, {shape[d] - k}, {k})", f"{{0}}.unbind({d})[0]"])
        return self.emit(code, (a,), "exact")

    def op_norm(self) -> bool:
        """``layer_norm``, with a weight and a bias added in most programs."""
        a = self.pick(lambda v: len(v.shape) >= 1 and v.dtype in FLOATS and self.reducible(v))
        if a is None or statistics_of_offset_rows(self.env[a].value):
            # rows like ``x + 70000.0``: float32 statistics decided by rounding on both sides
            # (seeds 99860152, 99850209), as the output generator avoids them (seed 83000950)
            return False
        n = self.env[a].shape[-1]
        x, weight, tail = "{0}", "{1}", ""
        if self.framework != "torch":
            # TensorPlay 1.0.0's eager layer_norm backward reads a strided input / weight and a
            # stride-0 gradient (a sum's) as if contiguous: wrong gradients (FINDINGS.md).
            # `.contiguous()` and `* 1.0` hand it contiguous ones.
            x, weight, tail = "{0}.contiguous()", "{1}.contiguous()", " * 1.0"
        if self.rng.random() < 0.3:
            return self.emit(f"(F.layer_norm({x}, ({n},)){tail})", (a,), "reduce")
        w = self.fresh((n,), self.env[a].dtype)
        if not self.emit(f"(F.layer_norm({x}, ({n},), {weight}, None){tail})", (a, w), "reduce"):
            return False
        out = self.stmts[-1].out
        b = self.fresh((n,), self.env[a].dtype)
        return self.emit("({0} + {1})", (out, b), "arith")

    def op_custom(self) -> bool:
        a = self.pick(lambda v: v.dtype in FLOATS)
        if a is None:
            return False
        op = "fuzz_gaffine" if self.rng.random() < 0.7 or self.env[a].dtype != "float32" \
            else "fuzz_affine"  # fuzz_affine: no register_autograd (its kernel differentiates)
        return self.emit(f"{op}({{0}}, {self.rng.choice(['2.0', '-0.5', '3.0'])})", (a,), "arith")

    # nan_to_num's default +-inf replacement is float32's max, whose square overflows: eager's
    # CPU layer_norm statistics of such a row are NaN or 0 by its moment algorithm (one-pass
    # E[x^2] - E[x]^2 on short rows), our recomputed two-pass ones finite (seed 71000639,
    # FINDINGS E10). Training programs keep the replacement finite; same draws, same programs.
    UNARY = [(("T.nan_to_num({0}, posinf=1e4, neginf=-1e4)", kind) if code == "T.nan_to_num({0})"
              else (code, kind)) for code, kind in Generator.UNARY] + [("{0}.detach()", "exact")]
    FAMILIES = [("op_binary", 22), ("op_compare", 4), ("op_where", 6), ("op_unary", 14),
                ("op_cast", 6), ("op_reduce", 10), ("op_norm", 4), ("op_matmul", 4),
                ("op_view", 10), ("op_cat", 4), ("op_split", 4), ("op_inplace", 4),
                ("op_custom", 3), ("op_repeat", 2)]

    def choose_outputs(self) -> List[str]:
        """The last value that requires grad, and a few earlier values."""
        produced = [s.out for s in self.stmts if s.out is not None]
        grads = [n for n in produced if getattr(self.env[n].value, "requires_grad", False)]
        if not grads:
            return super().choose_outputs()
        extra = [n for n in produced if n != grads[-1] and self.rng.random() < 0.12]
        return list(dict.fromkeys(extra[:2] + grads[-1:]))

    def parameters(self) -> List[str]:
        """In one program of four: the inputs a module holds as parameters (the checker
        compiles that module; its other inputs stay arguments)."""
        if self.rng.random() >= 0.25:
            return []
        return [s.name for s in self.inputs if requires_grad(s) and self.rng.random() < 0.6]


def generate_grad(seed: int, framework: str) -> Program:
    """Program ``seed`` of the gradient fuzzer: the first attempt whose eager backward runs."""
    for attempt in range(6):
        g = GradGenerator(seed, framework, attempt)
        program = g.generate()
        program.meta.update(grad=True, attempt=attempt, params=g.parameters())
        if attempt == 5 or eager_backward_error(program) is None:
            return program
    raise AssertionError("unreachable")


def replay_grad(program: Program) -> Optional[GradGenerator]:
    return replay(program, GradGenerator)  # type: ignore[return-value]


def eager_backward_error(program: Program) -> Optional[str]:
    """Why eager autograd cannot differentiate ``program`` (None: it can)."""
    from grad_check import backward_loss
    fn, _ = build_function(program, grad_ops(program.framework))
    T, _ = framework_modules(program.framework)
    args = [make_grad_input(T, spec) for spec in program.inputs]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = backward_loss(fn(*args), program.seed)
            if loss is not None:
                loss.backward()
    except Exception as exc:  # noqa: BLE001 - eager's own rejection
        return f"{type(exc).__name__}: {exc}"
    return None
