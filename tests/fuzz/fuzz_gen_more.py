"""Extra statement kinds for the fuzz generator: what a hostile but fair user also writes.

Registered into :class:`fuzz_gen.Generator` by :func:`register` (the generator calls it
for its default, wide, mode). Each family is a function of the generator; like the base
families it only proposes a statement, and ``try_add`` keeps it only when the framework's
own eager accepts it, so an op a framework lacks is simply never generated for it.

Exactness kinds follow fuzz_gen's levels: values moved without arithmetic (gather, sort
values, pad, cat, ...) are "exact"; indices chosen by comparing data (argmax, sort / topk
indices) and integer-valued results of rounded data are "discrete"; scans and contractions
are "reduce".
"""

from __future__ import annotations

from typing import Any, Tuple

from fuzz_avoid import statistics_of_offset_rows
from fuzz_gen_shapes import FAMILIES as SHAPE_FAMILIES

INT_DTYPES = ("int32", "int64")
WIDE_FLOATS = ("float32", "float16", "bfloat16", "float64")


def _dims(g: Any, a: str) -> Tuple[int, ...]:
    return g.env[a].shape


def _dim(g: Any, a: str) -> int:
    nd = len(_dims(g, a))
    return g.rng.randrange(-nd, nd) if nd else g.rng.choice([0, -1])


def _tp(g: Any) -> bool:
    return g.framework != "torch"


def _picked(values: bool, g: Any) -> str:
    """Kind of a selection: its values ("exact"; on torch "arith": which of 0.0 / -0.0 its
    vectorised max / sort keeps on a tie depends on the size) or indices ("discrete")."""
    if not values:
        return "discrete"
    return "arith" if g.framework == "torch" else "exact"


def op_wide_dtype(g: Any) -> bool:
    """int64 / float64 inputs and casts, mixed with the other dtypes (promotion)."""
    r = g.rng
    a = g.pick()
    if a is None:
        return False
    form = r.random()
    if form < 0.4:
        code = r.choice(["{0}.long()", "{0}.double()", "{0}.to(T.int64)", "{0}.to(T.float64)",
                         "{0}.to(dtype=T.float64)", "{0}.type(T.int64)"])
        kind = "discrete" if "int" in code or "long" in code else "exact"
        return g.emit(code, (a,), kind)
    b = g.fresh(g.broadcast_partner(g.env[a].shape), r.choice(["int64", "float64"]))
    op = r.choice(["+", "*", "-", "/"])
    return g.emit(f"({{0}} {op} {{1}})", (a, b) if r.random() < 0.5 else (b, a), "arith")


def op_scan(g: Any) -> bool:
    a = g.pick(g.reducible)
    if a is None:
        return False
    d = _dim(g, a)
    code = g.rng.choice([f"T.cumsum({{0}}, dim={d})", f"{{0}}.cumsum({d})",
                         f"{{0}}.cumprod(dim={d})", f"T.cumsum({{0}}, {d}, dtype=T.float32)",
                         f"T.logcumsumexp({{0}}, {d})", f"{{0}}.cummax({d})[0]",
                         f"{{0}}.cummin({d}).indices"])
    if "indices" in code:
        return g.emit(code, (a,), "discrete")
    return g.emit(code, (a,), "reduce")


def op_argreduce(g: Any) -> bool:
    """argmax / argmin / max(dim) values and indices: ties and NaN pick eager's element."""
    r = g.rng
    a = g.pick(lambda v: 0 not in v.shape)
    if a is None:
        return False
    d, k = _dim(g, a), r.choice([True, False])
    code = r.choice([f"{{0}}.argmax(dim={d}, keepdim={k})", f"T.argmin({{0}}, dim={d})",
                     "{0}.argmax()", "T.argmin({0})", f"{{0}}.max(dim={d}).indices",
                     f"T.min({{0}}, {d}, keepdim={k})[1]", f"T.max({{0}}, {d})[0]",
                     f"{{0}}.min(dim={d}, keepdim={k}).values", "T.max({0})", "{0}.min()"])
    kind = _picked("values" in code or "[0]" in code or code.endswith(("max({0})", "min()")), g)
    return g.emit(code, (a,), kind)


def op_sort(g: Any) -> bool:
    """sort / argsort / topk / kthvalue: values exact, indices decided by (tied) data."""
    r = g.rng
    a = g.pick(lambda v: 0 not in v.shape and v.dtype != "bool")
    if a is None:
        return False
    d = _dim(g, a)
    n = _dims(g, a)[d] if _dims(g, a) else 1
    kk = r.randint(1, max(1, n))
    desc = r.choice([True, False])
    code = r.choice([f"T.sort({{0}}, dim={d}, descending={desc})[0]",
                     f"{{0}}.sort(dim={d}, descending={desc}, stable=True)[1]",
                     f"T.argsort({{0}}, dim={d}, stable=True)",
                     f"{{0}}.topk({kk}, dim={d}).values", f"T.topk({{0}}, {kk}, {d}, largest=False)[0]",
                     f"{{0}}.topk({kk}, dim={d}, largest={desc}).indices",
                     f"{{0}}.kthvalue({kk}, {d})[0]", f"T.msort({{0}})"])
    kind = _picked(not ("[1]" in code or "indices" in code or "argsort" in code), g)
    return g.emit(code, (a,), kind)


def op_index(g: Any) -> bool:
    """gather / index_select / take_along_dim / tensor indexing / boolean-mask indexing."""
    r = g.rng
    a = g.pick(lambda v: len(v.shape) >= 1 and 0 not in v.shape)
    if a is None:
        return False
    shape = _dims(g, a)
    d = r.randrange(len(shape))
    n = shape[d]
    form = r.random()
    if form < 0.3:
        ishape = tuple(r.choice([1, s]) if i != d else r.randint(1, 4) for i, s in enumerate(shape))
        idx = g.fresh(ishape, "int64")
        fn = r.choice(["T.gather({0}, %d, {1} %% %d)", "{0}.gather(%d, {1} %% %d)",
                       "T.take_along_dim({0}, {1} %% %d, dim=%d)"])
        code = fn % ((n, d) if "take" in fn else (d, n))
        return g.emit(code, (a, idx), "discrete")
    if form < 0.55:
        idx = g.fresh((r.randint(1, 5),), "int64")
        code = r.choice([f"T.index_select({{0}}, {d}, {{1}} % {n})", f"{{0}}.index_select({d}, {{1}} % {n})",
                         f"{{0}}[{{1}} % {shape[0]}]", f"{{0}}[{{1}} % {shape[0]} - {shape[0]}]",
                         f"{{0}}[..., {{1}} % {shape[-1]}]"])
        return g.emit(code, (a, idx), "discrete")
    if form < 0.8:
        m = g.pick(lambda v: v.dtype == "bool" and v.shape == shape)
        if m is None:
            m = g.fresh(shape, "bool")
        code = r.choice(["{0}[{1}]", "T.masked_select({0}, {1})", "{0}[{1}].sum()"])
        return g.emit(code, (a, m), "discrete")
    # index assignment into an intermediate (shape-preserving, a write through indexing)
    if g.env[a].is_input or (_tp(g) and 0 in tuple(g.env[a].value.stride())):
        return False
    m = g.pick(lambda v: v.dtype == "bool" and v.shape == shape)
    s = g.scalar()
    if m is not None and r.random() < 0.6:
        return g.emit(f"{{0}}[{{1}}] = {s}", (a, m), "exact", out=False)
    idx = g.fresh((r.randint(1, 3),), "int64")
    return g.emit(f"{{0}}[{{1}} % {shape[0]}] = {s}", (a, idx), "exact", out=False)


def op_masked(g: Any) -> bool:
    """masked_fill / clamp with tensor bounds / where with Python scalars."""
    r = g.rng
    a = g.pick()
    if a is None:
        return False
    shape = _dims(g, a)
    form = r.random()
    if form < 0.4:
        m = g.pick(lambda v: v.dtype == "bool") or g.fresh(g.broadcast_partner(shape), "bool")
        fill = r.choice([g.scalar(), "T.tensor(2.5)", "-1"])
        code = r.choice([f"{{0}}.masked_fill({{1}}, {fill})", f"T.masked_fill({{0}}, {{1}}, {fill})"])
        return g.emit(code, (a, m), "exact")
    if form < 0.7:
        lo = g.fresh(g.broadcast_partner(shape), g.env[a].dtype)
        code = r.choice(["T.clamp({0}, min={1})", "{0}.clamp(max={1})", "T.clamp({0}, {1}, {1} + 1)",
                         "{0}.clamp({1}, None)", "T.clip({0}, max={1})"])
        return g.emit(code, (a, lo), "exact")
    c = g.pick(lambda v: v.dtype == "bool")
    if c is None:
        return g.emit(f"T.where({{0}} > 0, {g.scalar()}, {g.scalar()})", (a,), "discrete")
    code = r.choice([f"T.where({{0}}, {g.scalar()}, {g.scalar()})", "T.where({0}, 1, 0)",
                     "T.where({0}, 1.5, {1})", "T.where({0}, {1}, 0)"])
    return g.emit(code, (c, a), "exact")


def op_intops(g: Any) -> bool:
    """Integer division / remainder / bitwise ops / shifts, scalar and tensor operands."""
    r = g.rng
    a = g.pick(lambda v: v.dtype in INT_DTYPES + ("bool",))
    if a is None:
        a = g.pick()
        if a is None:
            return False
        return g.emit(r.choice(["{0}.int()", "{0}.long()", "(({0} * 4).long())"]), (a,), "discrete")
    shape, dt = _dims(g, a), g.env[a].dtype
    if r.random() < 0.5:
        s = r.choice(["1", "2", "3", "-3", "7"])
        code = r.choice([f"({{0}} // {s})", f"({{0}} % {s})", f"({{0}} & {s})", f"({{0}} | {s})",
                         f"({{0}} ^ {s})", f"({{0}} << {r.randint(0, 3)})", f"({{0}} >> {r.randint(0, 3)})",
                         f"T.bitwise_and({{0}}, {s})", f"T.remainder({{0}}, {s})", f"T.fmod({{0}}, {s})",
                         f"T.div({{0}}, {s}, rounding_mode='floor')", f"({{0}} / {s})",
                         "(~{0})", "T.bitwise_not({0})", f"T.floor_divide({{0}}, {s})"])
        if dt == "bool" and any(t in code for t in ("<<", ">>", "//", "%", "fmod", "div")):
            return False
        return g.emit(code, (a,), "discrete")
    b = g.pick(lambda v: v.dtype in INT_DTYPES and v.shape == shape) or \
        g.fresh(g.broadcast_partner(shape), r.choice(INT_DTYPES))
    # divisors of 1..7: TensorPlay 1.0.0's eager integer division by 0 dies of SIGFPE
    pos = "({1}.abs() + 1)"
    code = r.choice([f"({{0}} // {pos})", f"({{0}} % {pos})", f"T.fmod({{0}}, {pos})",
                     f"T.div({{0}}, {pos}, rounding_mode='trunc')", "({0} & {1})", "({0} | {1})",
                     "({0} ^ {1})", "({0} << ({1} & 3))", "({0} >> ({1} & 3))",
                     "T.bitwise_xor({0}, {1})"])
    if dt == "bool" and ("<<" in code or ">>" in code):
        return False
    return g.emit(code, (a, b), "discrete")


UNARY_MORE = [("{0}.abs()", "exact"), ("T.sign({0})", "exact"), ("{0}.floor()", "discrete"),
              ("{0}.ceil()", "discrete"), ("T.round({0}, decimals=1)", "discrete"),
              ("{0}.trunc()", "discrete"), ("T.frac({0})", "arith"), ("T.isinf({0})", "discrete"),
              ("T.isfinite({0})", "discrete"), ("T.isposinf({0})", "discrete"),
              ("T.isneginf({0})", "discrete"),
              ("T.nan_to_num({0}, nan=0.5, posinf=100.0, neginf=-100.0)", "exact"),
              ("T.nan_to_num({0}, nan=-1.0)", "exact"), ("F.relu6({0})", "exact"),
              ("F.hardtanh({0}, -0.5, 0.5)", "exact"), ("F.hardtanh({0})", "exact"),
              ("F.silu({0})", "arith"), ("F.gelu({0}, approximate='tanh')", "arith"),
              ("F.softplus({0})", "arith"), ("F.softplus({0}, beta=2.0, threshold=5.0)", "arith"),
              ("F.elu({0})", "arith"), ("F.elu({0}, alpha=0.5)", "arith"),
              ("F.leaky_relu({0})", "arith"), ("F.leaky_relu({0}, 0.2)", "arith"),
              ("F.hardsigmoid({0})", "arith"), ("F.hardswish({0})", "arith"),
              ("F.logsigmoid({0})", "arith"), ("F.mish({0})", "arith"),
              ("F.dropout({0}, p=0.5, training=False)", "exact"),
              ("F.dropout({0}, 0.3, False)", "exact"), ("T.sgn({0})", "exact")]


def op_unary_more(g: Any) -> bool:
    a = g.pick()
    if a is None:
        return False
    code, kind = g.rng.choice(UNARY_MORE)
    return g.emit(code, (a,), kind)


def op_logical(g: Any) -> bool:
    r = g.rng
    a = g.pick()
    if a is None:
        return False
    shape = _dims(g, a)
    b = g.pick(lambda v: v.shape == shape) or g.fresh(g.broadcast_partner(shape))
    code = r.choice(["T.logical_and({0}, {1})", "T.logical_or({0}, {1})", "T.logical_xor({0}, {1})",
                     "T.fmax({0}, {1})", "T.fmin({0}, {1})", "T.maximum({0}, {1})",
                     "T.minimum({0}, {1})", "({0} > 0) & ({1} < 0)", "({0} != 0) | {1}.isnan()"])
    if "fm" in code or "imum" in code:
        kind = "exact" if _tp(g) else "arith"  # torch's sign of zero on ties: see op_binary
    else:
        kind = "discrete"
    return g.emit(code, (a, b), kind)


def op_reduce_more(g: Any) -> bool:
    """var / std with correction, logsumexp, prod, all / any, reductions over several dims."""
    r = g.rng
    a = g.pick(g.reducible)
    if a is None:
        return False
    nd = len(_dims(g, a))
    d = _dim(g, a)
    k = r.choice([True, False])
    dims = tuple(sorted(r.sample(range(nd), min(nd, 2)))) if nd else (0,)
    code = r.choice([f"{{0}}.var(dim={d}, correction={r.choice([0, 1, 2])})",
                     f"T.std({{0}}, dim={d}, unbiased=False, keepdim={k})", "{0}.std()",
                     f"{{0}}.var({dims}, keepdim={k})", f"T.logsumexp({{0}}, dim={d})",
                     f"{{0}}.logsumexp({dims}, keepdim={k})", "{0}.prod()",
                     f"T.prod({{0}}, {d})", f"{{0}}.all(dim={d})", "{0}.any()", "T.all({0})",
                     f"T.any({{0}}, {d}, keepdim={k})", f"{{0}}.mean(dim={dims}, keepdim={k})",
                     f"{{0}}.sum({dims})", f"{{0}}.amax({dims}, keepdim={k})", f"T.amin({{0}}, {dims})",
                     f"{{0}}.sum(dim={d}, dtype=T.float32)", f"T.mean({{0}}, {d}, dtype=T.float32)",
                     f"{{0}}.norm(dim={d})", f"T.count_nonzero({{0}}, {d})",
                     f"T.aminmax({{0}}, dim={d})[1]", f"{{0}}.nansum({d})"])
    if ("var(" in code or "std(" in code) and (statistics_of_offset_rows(
            g.env[a].value, d) or statistics_of_offset_rows(g.env[a].value, None)):
        return False  # summation order decides such statistics (fuzz_avoid)
    if "all" in code or "any" in code:
        kind = "discrete" if g.env[a].level >= 1 else "exact"
        return g.emit(code, (a,), "reduce" if g.env[a].level >= 2 else kind)
    kind = _picked(True, g) if ("amax" in code or "amin" in code) else "reduce"
    return g.emit(code, (a,), kind)


def op_softmax_dtype(g: Any) -> bool:
    a = g.pick(lambda v: v.dtype in WIDE_FLOATS and g.reducible(v))
    if a is None:
        return False
    d = _dim(g, a)
    code = g.rng.choice([f"T.softmax({{0}}, dim={d}, dtype=T.float32)",
                         f"F.log_softmax({{0}}, dim={d}, dtype=T.float32)",
                         f"F.softmax({{0}}, {d}, dtype=T.float64)", f"{{0}}.softmax({d})",
                         f"F.softmin({{0}}, dim={d})", f"F.normalize({{0}}, dim={d})"])
    return g.emit(code, (a,), "reduce")


FAMILIES = [("op_wide_dtype", 6), ("op_scan", 3), ("op_argreduce", 4), ("op_sort", 4),
            ("op_index", 5), ("op_masked", 5), ("op_intops", 5), ("op_unary_more", 7),
            ("op_logical", 4), ("op_reduce_more", 5), ("op_softmax_dtype", 2)]

#: Pointwise families for the 64Ki+ element programs (TileLang's CPU range under "auto").
BIG_FAMILIES = [("op_unary_more", 10), ("op_logical", 4), ("op_masked", 4), ("op_wide_dtype", 2)]

FUNCS = {name: fn for name, fn in globals().items() if name.startswith("op_")}


def _no_stale_input(g: Any, added: bool) -> bool:
    """A family that made a fresh input and then gave up leaves none pending: the next
    statement's fresh input would take the same name (duplicate parameter ``x2``)."""
    if not added:
        g.pending = None
    return added


def _nonempty_on_tensorplay(fn):
    """``fn`` picking only non-empty values on TensorPlay: its 1.0.0 eager dies of SIGFPE on
    several of these ops over a size-0 dim (``tril`` of a (3, 0, 1) tensor), killing the
    generator's process. torch programs keep empty tensors."""
    def family(g: Any) -> bool:
        if g.framework == "torch":
            return _no_stale_input(g, fn(g))
        pick = g.pick
        g.pick = lambda pred=lambda v: True, prefer_intermediate=False: pick(
            lambda v: 0 not in v.shape and pred(v), prefer_intermediate)
        try:
            return _no_stale_input(g, fn(g))
        finally:
            del g.pick
    family.__name__ = fn.__name__
    return family


def register(cls: Any) -> None:
    """Add every extra family (this module's and fuzz_gen_shapes') to the generator class."""
    import fuzz_gen_shapes
    for name, fn in {**FUNCS, **fuzz_gen_shapes.FUNCS}.items():
        setattr(cls, name, _nonempty_on_tensorplay(fn))
    cls.WIDE_FAMILIES = cls.FAMILIES + FAMILIES + SHAPE_FAMILIES
    cls.WIDE_BIG_FAMILIES = cls.BIG_FAMILIES + BIG_FAMILIES
