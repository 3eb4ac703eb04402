"""Extra generator families about shapes and program structure (see fuzz_gen_more).

Layout ops (tril / flip / roll / pad / repeat / expand), joins and splits, contractions
(einsum / bmm / baddbmm / conv), factory functions inside the program, Python control flow
on shapes and loops unrolled at capture, a small ``nn.Module`` with a parameter and a
buffer, and the program's return form (tuple, list, dict or a bare tensor).
"""

from __future__ import annotations

from typing import Any

FLOATISH = ("float32", "float16", "bfloat16", "float64")
RETURN_FORMS = ["tuple"] * 6 + ["list", "dict", "bare"]


def _shape_str(shape) -> str:
    return "(" + "".join(f"{d}, " for d in shape) + ")"


def op_layout(g: Any) -> bool:
    r = g.rng
    a, shape = g.pick_with_shape()
    if a is None:
        return False
    nd = len(shape)
    choices = ["{0}.flip(0)", "T.roll({0}, 1)", f"{{0}}.repeat({', '.join(['2'] + ['1'] * nd)})",
               "F.pad({0}, (1, 2))", f"F.pad({{0}}, (0, 1), value={g.scalar()})"]
    if nd >= 1:
        d = r.randrange(nd)
        choices += [f"T.flip({{0}}, ({d},))", f"T.roll({{0}}, {r.choice([-1, 1, 2, 7])}, {d})",
                    f"{{0}}.repeat_interleave({r.randint(1, 3)}, dim={d})",
                    f"{{0}}.expand(3, *{{0}}.shape).contiguous()", "F.pad({0}, (-1, 1))",
                    f"{{0}}.narrow({d}, 0, {max(0, shape[d] - 1)})", f"{{0}}.movedim({d}, 0)",
                    f"{{0}}.select({d}, -1)" if shape[d] else "{0}.flip(-1)"]
    if nd >= 2:
        k = r.choice([-1, 0, 1, 2])
        choices += [f"{{0}}.tril({k})", f"T.triu({{0}}, diagonal={k})", "T.tril({0})",
                    "{0}.flip((0, -1))", "T.roll({0}, (1, -1), (0, 1))",
                    "F.pad({0}, (1, 0, 0, 2), value=-1.0)", "{0}.diagonal()",
                    "T.diagonal({0}, offset=1, dim1=-2, dim2=-1)"]
    if nd in (2, 3) and g.env[a].dtype in FLOATISH and min(shape) >= 2:
        choices += [f"F.pad({{0}}, (1, 1), mode='{m}')" for m in ("reflect", "replicate", "circular")]
    return g.emit(r.choice(choices), (a,), "exact")


def op_join(g: Any) -> bool:
    """stack / cat (same dtype or promoting) and split / chunk / unbind pieces."""
    r = g.rng
    a = g.pick()
    if a is None:
        return False
    shape = g.env[a].shape
    nd = len(shape)
    d = r.randrange(nd) if nd else 0
    if r.random() < 0.5:
        b = g.pick(lambda v: v.shape == shape) or g.fresh(shape, g.env[a].dtype if r.random() < 0.7 else None)
        code = r.choice([f"T.stack([{{0}}, {{1}}], dim={d})", f"T.stack(({{0}}, {{1}}, {{0}}))",
                         f"T.cat([{{0}}, {{1}}], dim={d})", f"T.cat(({{1}}, {{0}}), {-1 if nd else 0})",
                         "T.hstack([{0}, {1}])", "T.vstack([{0}, {1}])"])
        return g.emit(code, (a, b), "exact")
    if not nd:
        return False
    n = shape[d]
    i = r.randrange(max(1, (n + 1) // 2))
    code = r.choice([f"{{0}}.split(2, dim={d})[{i}]", f"T.split({{0}}, 1, {d})[-1]",
                     f"{{0}}.chunk(2, {d})[0]", f"T.chunk({{0}}, 3, dim={d})[-1]",
                     f"{{0}}.unbind({d})[{min(i, n - 1)}]", f"T.unbind({{0}})[-1]",
                     f"{{0}}.split([{n - 1}, 1], {d})[0]" if n >= 1 else "{0}.split(1)[0]",
                     f"sum({{0}}.unbind({d}))" if n else "{0}.chunk(1)[0]",
                     f"T.cat({{0}}.chunk(2, {d})[::-1], {d})"])
    return g.emit(code, (a,), "reduce" if code.startswith("sum(") else "exact")


def op_contract(g: Any) -> bool:
    """einsum / bmm / baddbmm / mm / addmm / outer / mv on small shapes."""
    r = g.rng
    a = g.pick(lambda v: 1 <= len(v.shape) <= 3 and v.dtype in FLOATISH and g.reducible(v))
    if a is None:
        return False
    shape, dt = g.env[a].shape, g.env[a].dtype
    x = "{0}.contiguous()" if g.framework != "torch" and dt != "float32" else "{0}"  # see op_matmul
    m = r.choice([1, 2, 3, 5])
    if len(shape) == 3:
        b, n, k = shape
        form = r.choice(["bmm", "baddbmm", "einsum"])
        if form == "einsum":
            w = g.fresh((b, k, m), dt)
            return g.emit(f"T.einsum('bij,bjk->bik', {x}, {{1}})", (a, w), "reduce")
        w = g.fresh((b, k, m), dt)
        if g.framework != "torch":
            x, y = "{0}.contiguous()", "{1}.contiguous()"  # TensorPlay 1.0.0's eager baddbmm
            #  of a strided batch operand changes from call to call (FINDINGS.md, seed 1366)
        else:
            y = "{1}"
        if form == "bmm":
            return g.emit(f"T.bmm({x}, {y})", (a, w), "reduce")
        # TensorPlay 1.0.0's 16-bit eager baddbmm with beta=0.0 is wrong (FINDINGS.md, 50006066)
        betas = [0.5, 1.0] if g.framework != "torch" and dt != "float32" else [0.0, 0.5, 1.0]
        return g.emit(f"T.baddbmm(T.ones({b}, {n}, {m}, dtype={{0}}.dtype), {x}, {y}, "
                      f"beta={r.choice(betas)}, alpha={r.choice([1.0, 2.0])})", (a, w), "reduce")
    if len(shape) == 2:
        n, k = shape
        w = g.fresh((k, m), dt)
        code = r.choice([f"T.einsum('ij,jk->ik', {x}, {{1}})", f"T.einsum('ij,jk->ki', {x}, {{1}})",
                         f"T.mm({x}, {{1}})",
                         f"T.addmm(T.zeros({m}, dtype={{0}}.dtype), {x}, {{1}}, beta=0.5)",
                         f"T.einsum('ij,jk', {x}, {{1}})"])
        return g.emit(code, (a, w), "reduce")
    (k,) = shape
    w = g.fresh((k,) if r.random() < 0.5 else (m, k), dt)
    code = r.choice(["T.einsum('i,i->', {0}, {1})", "T.outer({0}, {1})", "T.einsum('i,j->ij', {0}, {1})"]) \
        if len(g.pending.shape) == 1 else r.choice(["T.mv({1}, {0})", "T.einsum('ki,i->k', {1}, {0})"])
    return g.emit(code, (a, w), "reduce")


def op_factory(g: Any) -> bool:
    """Tensors made inside the program: *_like, ones / full / arange with dtype, empty + fill_."""
    r = g.rng
    a = g.pick()
    if a is None:
        return False
    shape = g.env[a].shape
    s = _shape_str(shape)
    n = shape[-1] if shape else 1
    dt = r.choice(["T.float32", "T.int64", "T.float16", "T.int32", "T.bool", "T.float64"])
    code = r.choice([f"T.zeros_like({{0}})", f"T.ones_like({{0}}, dtype={dt})",
                     f"T.full_like({{0}}, {r.choice(['2', '-1.5', '7'])})",
                     f"({{0}} + T.ones({s}, dtype={dt}))", f"({{0}} * T.full({s}, {g.scalar()}))",
                     f"({{0}} + T.arange({n}, dtype={dt}))", f"({{0}} - T.arange(0, {2 * n}, 2))",
                     f"({{0}} * T.empty({s}).fill_({r.choice(['0.5', '3', '-2'])}))",
                     f"T.empty_like({{0}}).fill_(1)", f"{{0}}.new_zeros({s})",
                     f"({{0}} + {{0}}.new_full({s}, 3))", f"({{0}} + T.zeros({n}, dtype={dt}))",
                     f"({{0}} * T.linspace(-1, 1, {n}))", f"T.arange({n}, dtype={dt})",
                     f"({{0}} + T.eye({n})[0])"])
    return g.emit(code, (a,), "exact" if "*" not in code and "linspace" not in code else "arith")


def op_control(g: Any) -> bool:
    """Python control flow on shapes / dims (resolved at capture) and unrolled loops."""
    r = g.rng
    a = g.pick()
    if a is None:
        return False
    code = r.choice([
        "({0} * 2 if {0}.dim() > 1 and {0}.shape[0] > 2 else {0} - 1)",
        "({0}.sum(0) if {0}.dim() >= 2 else {0} + 1)",
        "({0} + 1 if {0}.numel() > 6 else {0}.flip(0) if {0}.dim() else -{0})",
        "sum({0} * k for k in range(3))",
        "T.stack([{0}[i] for i in range({0}.shape[0])]) if {0}.dim() else {0}",
        "T.cat([{0}] * 3, dim=-1) if {0}.dim() else {0}",
        "[{0} + i for i in range(4)][-1]",
        "({0}.reshape({0}.shape[0], -1) if {0}.dim() >= 2 else {0}.reshape(-1, 1))",
        "dict(a={0}, b={0} * 3)['b']",
        "({0}.t() if len({0}.shape) == 2 else {0})",
        "({0}.float() if {0}.dtype != T.float32 else {0} + 0.5)",
        "({0}.mean() if {0}.is_floating_point() else {0}.sum())",
    ])
    kind = "reduce" if ("sum(" in code or ".sum" in code or "mean" in code) else "arith"
    return g.emit(code, (a,), kind)


def op_conv(g: Any) -> bool:
    """conv1d / conv2d of a small float32 signal: a reshaped value with a fresh weight."""
    r = g.rng
    a = g.pick(lambda v: v.dtype == "float32" and len(v.shape) >= 1 and 0 not in v.shape
               and v.value.numel() >= 2)
    if a is None:
        return False
    shape = g.env[a].shape
    bias = r.choice(["", ", bias=T.ones(2)"])
    if len(shape) >= 2 and shape[-2] >= 2 and shape[-1] >= 2 and r.random() < 0.5:
        h = shape[-2]
        w = g.fresh((2, 1, r.randint(1, min(3, h)), r.randint(1, min(3, shape[-1]))), "float32")
        pad = r.choice(["", ", padding=1", ", stride=2", ", padding='same'"])
        return g.emit(f"F.conv2d({{0}}.reshape(1, 1, {h}, -1), {{1}}{bias}{pad})", (a, w), "reduce")
    numel = g.env[a].value.numel()
    w = g.fresh((2, 1, r.randint(1, min(3, numel))), "float32")
    extra = r.choice(["", ", padding=1", ", stride=2", ", dilation=2", ", padding='same'"])
    return g.emit(f"F.conv1d({{0}}.reshape(1, 1, -1), {{1}}{bias}{extra})", (a, w), "reduce")


def op_module(g: Any) -> bool:
    """A small nn.Module (Linear + parameter + buffer), the same instance on every call."""
    a = g.pick(lambda v: v.dtype == "float32" and len(v.shape) >= 1 and 1 <= v.shape[-1] <= 8)
    if a is None:
        return False
    n = g.env[a].shape[-1]
    return g.emit(f"fuzz_mod({n})({{0}})", (a,), "reduce")


def op_write_view(g: Any) -> bool:
    """In-place writes through a view of an intermediate (the base must see them) and
    in-place ops with tensor operands: ``v[:, 0].add_(1)``, ``v.t().mul_(w)``, ``v += w``."""
    r = g.rng
    a = g.pick(lambda v: not v.is_input, prefer_intermediate=True)
    if a is None or (g.framework != "torch" and 0 in tuple(g.env[a].value.stride())):
        return False  # TensorPlay 1.0.0 corrupts its heap writing through an expand()
    shape = g.env[a].shape
    nd = len(shape)
    s = g.scalar()
    choices = [f"{{0}}.masked_fill_({{0}} > 0, {s})", "{0}.abs_()", f"{{0}}.clamp_(max={s})"]
    if nd >= 1:
        choices += [f"{{0}}[0].add_({s})", f"{{0}}[..., -1:].mul_({s})", "{0}[::2].zero_()",
                    f"{{0}}.view(-1)[0] = {s}" if g.env[a].value.is_contiguous() else "{0}[0].neg_()",
                    f"{{0}}.narrow(0, 0, 1).fill_({s})", "{0}.flip(0).clone().neg_()"]
    if nd >= 2:
        choices += [f"{{0}}.t().mul_({s})" if nd == 2 else f"{{0}}.transpose(0, 1).add_({s})",
                    f"{{0}}.diagonal().fill_({s})", f"{{0}}[:, 0] = {{0}}[:, -1]",
                    f"{{0}}[1:, :].sub_({s})"]
    dt = g.env[a].dtype
    b = g.pick(lambda v: v.shape == shape and v.dtype == dt and v is not g.env[a])
    if b is not None:
        choices += ["{0} += {1}", "{0} *= {1}", "{0}.copy_({1}.flip(0) if {1}.dim() else {1})",
                    "{0}.clamp_(min={1})", "{0}.masked_fill_({1} > 0, 1)"]
    code = r.choice(choices)
    args = (a, b) if "{1}" in code else (a,)
    return g.emit(code, args, "arith", out=False)


def return_form(g: Any) -> str:
    return g.rng.choice(RETURN_FORMS)


FAMILIES = [("op_layout", 7), ("op_join", 5), ("op_contract", 3), ("op_factory", 4),
            ("op_control", 4), ("op_conv", 2), ("op_module", 2), ("op_write_view", 5)]

FUNCS = {name: fn for name, fn in globals().items() if name.startswith("op_")}
