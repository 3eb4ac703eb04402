"""The narrow generator's statement families (``Generator.op_*``, ``fuzz_gen.py``).

Each method picks operands among the values made so far, writes one statement and offers it
to ``try_add`` (which runs it eagerly and keeps it only when eager accepts it); it returns
whether a statement was added. The wide families are in ``fuzz_gen_more.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuzz_avoid import statistics_of_offset_rows
from fuzz_program import Stmt

if TYPE_CHECKING:
    from fuzz_gen import Var

FLOATS = ("float32", "float16", "bfloat16")
DTYPES = FLOATS + ("int32", "bool")


class NarrowOps:
    """Mixed into ``fuzz_gen.Generator``: ``self`` has its ``rng``, ``env``, ``pick``,
    ``fresh``, ``emit`` and ``try_add``."""

    def op_binary(self) -> bool:
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        form = r.random()
        ops = ["+", "-", "*", "/", "**"] + ["+", "*", "-"]
        if form < 0.45:
            op, s = r.choice(ops), self.scalar()
            code = f"({{0}} {op} {s})" if r.random() < 0.5 else f"({s} {op} {{0}})"
            return self.emit(code, (a,), "arith")
        if form < 0.55:
            fn = r.choice(['T.div({0}, {1}, rounding_mode="floor")', "T.remainder({0}, {1})",
                           'T.div({0}, {1}, rounding_mode="trunc")', "({0} // {1})"])
            s = self.scalar()
            if "remainder" in fn and s in ("0", "-0.0") and self.framework != "torch":
                return False  # TensorPlay 1.0.0's eager integer remainder by 0 dies (SIGFPE)
            return self.emit(fn.replace("{1}", s), (a,), "discrete")
        shape = self.env[a].shape
        b = self.pick(lambda v: v.shape == shape or r.random() < 0.3)
        if b is None or r.random() < 0.35:
            b = self.fresh(self.broadcast_partner(shape), self.env[a].dtype if r.random() < 0.6 else None)
        fn = r.choice([f"({{0}} {r.choice(ops)} {{1}})", "T.maximum({0}, {1})",
                       "T.minimum({0}, {1})", f"({{0}} {r.choice(ops)} {{1}})"])
        # torch's minimum / maximum pick either zero on a 0.0 / -0.0 tie depending on the
        # size (scalar vs vectorised loop): the sign of zero is only exact in TensorPlay.
        kind = "exact" if "imum" in fn and self.framework != "torch" else "arith"
        return self.emit(fn, (a, b) if r.random() < 0.8 else (b, a), kind)

    def op_compare(self) -> bool:
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        op = r.choice(["<", "<=", ">", ">=", "==", "!="])
        if r.random() < 0.5:
            s = self.scalar()
            code = f"({{0}} {op} {s})" if r.random() < 0.7 else f"({s} {op} {{0}})"
            return self.emit(code, (a,), "discrete")
        shape = self.env[a].shape
        b = self.pick(lambda v: v.shape == shape) or self.fresh(self.broadcast_partner(shape))
        return self.emit(f"({{0}} {op} {{1}})", (a, b), "discrete")

    def op_where(self) -> bool:
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        c = self.pick(lambda v: v.dtype == "bool")
        if c is None:
            return self.emit(f"T.where({{0}} > {r.choice(['0', '0.5', '-1'])}, {{0}}, {self.scalar()})",
                             (a,), "discrete")
        if r.random() < 0.4:
            return self.emit(f"T.where({{0}}, {{1}}, {self.scalar()})", (c, a), "exact")
        b = self.pick() or a
        return self.emit("T.where({0}, {1}, {2})", (c, a, b), "exact")

    UNARY = [("T.exp({0})", "arith"), ("{0}.abs()", "exact"), ("T.relu({0})", "exact"),
             ("{0}.sigmoid()", "arith"), ("T.tanh({0})", "arith"), ("T.log({0})", "arith"),
             ("T.sqrt({0})", "arith"), ("{0}.rsqrt()", "arith"), ("T.sin({0})", "arith"),
             ("T.floor({0})", "discrete"), ("T.ceil({0})", "discrete"), ("T.round({0})", "discrete"),
             ("T.trunc({0})", "discrete"), ("{0}.reciprocal()", "arith"), ("(-{0})", "exact"),
             ("{0}.clamp(min=-1.0, max=2.0)", "exact"), ("{0}.clamp(min=0)", "exact"),
             ("F.gelu({0})", "arith"), ("F.silu({0})", "arith"), ("T.logical_not({0})", "exact"),
             ("(~{0})", "exact"), ("T.isnan({0})", "exact"), ("T.sign({0})", "exact"),
             ("T.square({0})", "arith"), ("F.relu({0})", "exact"), ("T.nan_to_num({0})", "exact")]

    def op_unary(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        code, kind = self.rng.choice(self.UNARY)
        return self.emit(code, (a,), kind)

    def op_cast(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        r = self.rng
        target = r.choice(DTYPES)
        code = r.choice([{"float32": "{0}.float()", "float16": "{0}.half()", "bfloat16": "{0}.bfloat16()",
                          "int32": "{0}.int()", "bool": "{0}.bool()"}[target],
                         f"{{0}}.to(T.{target})"])
        kind = "discrete" if target in ("int32", "bool") else "exact"
        return self.emit(code, (a,), kind)

    def reducible(self, v: Var) -> bool:
        # TensorPlay 1.0.0's eager softmax dies with SIGFPE on a size-0 dim: keep it off
        # empty tensors (a crash of eager itself, not of the compiler).
        return self.framework == "torch" or 0 not in v.shape

    def op_reduce(self) -> bool:
        r = self.rng
        a = self.pick(self.reducible)
        if a is None:
            return False
        nd = len(self.env[a].shape)
        d = r.randrange(-nd, nd) if nd else r.choice([0, -1])
        k = r.choice([True, False])
        code = r.choice([f"{{0}}.sum(dim={d}, keepdim={k})", f"{{0}}.mean(dim={d}, keepdim={k})",
                         f"{{0}}.amax(dim={d}, keepdim={k})", f"{{0}}.amin(dim={d}, keepdim={k})",
                         f"T.sum({{0}}, {d})", "{0}.sum()", "{0}.mean()", "{0}.amax()",
                         f"{{0}}.prod(dim={d}, keepdim={k})", f"T.softmax({{0}}, dim={d})",
                         f"F.log_softmax({{0}}, dim={d})", f"F.softmax({{0}}, dim={d})",
                         f"{{0}}.max(dim={d}, keepdim={k}).values", f"{{0}}.var(dim={d})"])
        if "softmax" in code and self.framework != "torch" and self.env[a].dtype not in FLOATS:
            return False  # TensorPlay 1.0.0's eager softmax of bool segfaults
        if ".var(" in code and statistics_of_offset_rows(self.env[a].value, d):
            return False
        # torch keeps either zero of a 0.0 / -0.0 tie by its loop (seed 83000069): its
        # selected values are compared without the sign of zero (fuzz_gen_more._picked)
        picks = "amax" in code or "amin" in code or "max(" in code
        kind = "reduce" if not picks else "arith" if self.framework == "torch" else "exact"
        return self.emit(code, (a,), kind)

    def op_norm(self) -> bool:
        a = self.pick(lambda v: len(v.shape) >= 1 and v.dtype in FLOATS and self.reducible(v))
        if a is None:
            return False
        if statistics_of_offset_rows(self.env[a].value):
            return False
        n = self.env[a].shape[-1]
        x = "{0}"
        if self.framework != "torch" and self.env[a].dtype != "float32":
            # TensorPlay 1.0.0's eager 16-bit layer_norm of an expand()ed (stride-0) tensor
            # returns NaN / wrong rows; of a contiguous copy, the right ones (FINDINGS.md)
            x = "{0}.contiguous()"
        if self.rng.random() < 0.5:
            return self.emit(f"F.layer_norm({x}, ({n},))", (a,), "reduce")
        w = self.fresh((n,), self.env[a].dtype)
        return self.emit(f"F.layer_norm({x}, ({n},), {{1}}, None)", (a, w), "reduce")

    def op_matmul(self) -> bool:
        r = self.rng
        a = self.pick(lambda v: len(v.shape) >= 1 and self.reducible(v))
        if a is None:
            return False
        if self.framework != "torch" and self.env[a].dtype == "bfloat16" and \
                len(self.env[a].shape) >= 3:
            return False  # TensorPlay 1.0.0's threaded bfloat16 batched matmul races (FINDINGS.md)
        k = self.env[a].shape[-1]
        m = r.choice([1, 2, 3, 8]) if not self.big else r.choice([64, 256])
        b = self.fresh((k, m) if r.random() < 0.85 else (k,), self.env[a].dtype)
        x = "{0}"
        if self.framework != "torch" and self.env[a].dtype != "float32":
            x = "{0}.contiguous()"  # TensorPlay 1.0.0's 16-bit matmul of a transposed view
            #                         gives run-to-run different values in eager (FINDINGS.md)
        y = "{1}.contiguous()" if x != "{0}" else "{1}"
        code = f"({x} @ {y})" if r.random() < 0.7 else f"T.matmul({x}, {y})"
        return self.emit(code, (a, b), "reduce")

    def op_view(self) -> bool:
        r = self.rng
        a, shape = self.pick_with_shape()
        if a is None:
            return False
        nd = len(shape)
        choices = ["{0}.contiguous()", "{0}.reshape(-1)", "{0}[..., None]", "{0}.unsqueeze(0)",
                   "{0}.flatten()"]
        if nd >= 1:
            choices += ["{0}[1:]", "{0}[..., ::2]", "{0}[0]", f"{{0}}.squeeze({r.randrange(nd)})",
                        "{0}[-1:]", f"{{0}}.expand(2, {', '.join(map(str, shape))})"]
        if nd >= 2:
            i, j = r.sample(range(nd), 2)
            perm = list(range(nd))
            r.shuffle(perm)
            choices += [f"{{0}}.transpose({i}, {j})", f"{{0}}.permute({', '.join(map(str, perm))})",
                        "{0}[:, 1:]", f"{{0}}.reshape({shape[0]}, -1)", "{0}.view(-1)"]
        if nd == 2:
            choices += ["{0}.t()", "{0}.T"]
        return self.emit(r.choice(choices), (a,), "exact")

    def op_inplace(self) -> bool:
        r = self.rng
        a = self.pick(prefer_intermediate=True)
        if a is None:
            return False
        if self.env[a].is_input and r.random() < 0.5:
            return False
        if self.framework != "torch" and 0 in tuple(self.env[a].value.stride()):
            return False  # TensorPlay 1.0.0 corrupts its heap writing through an expand()
        s = self.scalar()
        choices = [(f"{{0}}.add_({s})", 1), (f"{{0}}.mul_({s})", 1), ("{0}.relu_()", 0),
                   (f"{{0}}.clamp_(min={r.choice(['0.0', '-1.0'])})", 0), (f"{{0}}[0] = {s}", 0),
                   (f"{{0}}[..., :1] = {s}", 0), ("{0}.zero_()", 0), (f"{{0}}.fill_({s})", 0),
                   (f"{{0}}.sub_({s})", 1), ("{0}.neg_()", 0)]
        shape = self.env[a].shape
        b = self.pick(lambda v: v.shape == shape and v is not self.env[a])
        if b is not None:
            choices += [("{0}.copy_({1})", 0), ("{0}.add_({1})", 1), ("{0}.mul_({1})", 1)]
        if self.env[a].dtype == "float32":
            choices.append(("fuzz_bump_({0})", 1))
        code, level = r.choice(choices)
        args = (a, b) if "{1}" in code else (a,)
        return self.emit(code, args, "arith" if level else "exact", out=False)

    def op_custom(self) -> bool:
        a = self.pick(lambda v: v.dtype == "float32")
        if a is None:
            return False
        return self.emit(f"fuzz_affine({{0}}, {self.rng.choice(['2.0', '-0.5', '3.0'])})", (a,), "arith")

    def op_repeat(self) -> bool:
        """CSE bait: the same pure expression again, often written in place afterwards."""
        pure = [s for s in self.stmts if s.out is not None]
        if not pure:
            return False
        s = self.rng.choice(pure[-5:])
        if not self.try_add(Stmt(self.out_name(), s.code, s.args, s.kind)):
            return False
        name = self.stmts[-1].out
        if self.framework != "torch" and 0 in tuple(self.env[name].value.stride()):
            return True  # no in-place write through an expand() on TensorPlay (see op_inplace)
        if self.rng.random() < 0.6:
            self.try_add(Stmt(None, self.rng.choice(["{0}.mul_(10)", "{0}.add_(1)", "{0}.zero_()"]),
                              (name,), "arith"))
        return True
