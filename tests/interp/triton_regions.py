"""Build a ``Region`` from a small program without the capture/pass pipeline.

Test fixture (not shipped): used by the Triton backend's tests and ``benchmarks/gpu.py``: ``build(fn, *examples)``
calls ``fn(b, *placeholders)`` where ``b.call(target, *args, **kwargs)`` adds a
node; every node is normalized with ``prims.lookup`` and gets its
``tensor_meta`` by running the real op on the example inputs.
"""

from __future__ import annotations

from typing import Any, Callable, List

from tensorplay_graph.backends.base import Region
from tensorplay_graph.frameworks import adapter_for, tensor_meta
from tensorplay_graph.ir.graph import Graph


class _Builder:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.values = {}

    def call(self, target: Any, *args: Any, **kwargs: Any):
        from tensorplay_graph import prims
        from tensorplay_graph.ir.node import map_arg
        node = self.graph.call_function(target, tuple(args), dict(kwargs))
        found = prims.lookup(node)
        if found is None:
            raise ValueError(f"no prim for {target}")
        node.meta["prim"], node.meta["prim_args"] = found
        real_args = map_arg(tuple(args), lambda n: self.values[n])
        real_kwargs = map_arg(dict(kwargs), lambda n: self.values[n])
        value = target(*real_args, **real_kwargs)
        self.values[node] = value
        node.meta["tensor_meta"] = tensor_meta(value)
        return node


def build(fn: Callable[..., Any], *examples: Any, region_id: int = 0) -> Region:
    """A region holding every node ``fn`` adds; outputs are ``fn``'s return value(s)."""
    graph = Graph()
    builder = _Builder(graph)
    inputs: List[Any] = []
    for i, example in enumerate(examples):
        node = graph.placeholder(f"in{i}")
        node.meta["tensor_meta"] = tensor_meta(example)
        builder.values[node] = example
        inputs.append(node)
    result = fn(builder, *inputs)
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    graph.output(tuple(outputs))
    nodes = [n for n in graph.nodes if n.op == "call_function"]
    return Region(region_id, "triton", nodes, inputs, outputs)


class _Eager:
    """A builder whose ``call`` just calls the target (one object: torch.compile guards stay stable)."""

    @staticmethod
    def call(target, *args, **kwargs):
        return target(*args, **kwargs)


EAGER = _Eager()


def eager(fn: Callable[..., Any], *examples: Any):
    """Run ``fn`` eagerly: every ``b.call`` calls its target."""
    out = fn(EAGER, *examples)
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# ----------------------------------------------------------------------------- case table
# (name, program, example factory(device, dtype)) -- shared by tests/interp and benchmarks/gpu.py.

def _cases():
    torch = adapter_for("torch").module
    F = adapter_for("torch").functional()

    def rnd(*shape, device, dtype):
        return torch.randn(*shape, device=device).to(dtype)

    def chain(b, x, y):
        a = b.call(torch.mul, x, y)
        a = b.call(torch.add, a, 1.0)
        a = b.call(torch.sigmoid, a)
        a = b.call(torch.mul, a, x)
        a = b.call(torch.sub, a, 0.5)
        a = b.call(torch.relu, a)
        a = b.call(torch.mul, a, 2.0)
        return b.call(torch.add, a, y)

    def broadcast(b, x, col, row):
        return b.call(torch.tanh, b.call(torch.add, b.call(torch.mul, x, col), row))

    def two_outputs(b, x, y):
        s = b.call(torch.add, x, y)
        return s, b.call(torch.exp, b.call(torch.neg, s))

    def mixed(b, x, i):
        return b.call(torch.add, b.call(torch.mul, x, i), 3)

    def where_cmp(b, x, y):
        return b.call(torch.where, b.call(torch.gt, x, y), x, b.call(torch.mul, y, -1.5))

    def softmax(b, x):
        return b.call(torch.softmax, x, -1)

    def log_softmax_dim0(b, x):
        return b.call(torch.log_softmax, x, 0)

    def ln_gelu(b, x, r, w, bias):
        h = b.call(torch.add, x, r)
        return b.call(F.gelu, b.call(F.layer_norm, h, (96,), w, bias))

    def rms_silu(b, x, w):
        return b.call(F.silu, b.call(F.rms_norm, b.call(torch.mul, x, 0.5), (200,), w))

    def reductions(b, x):
        return (b.call(torch.sum, x, -1), b.call(torch.mean, x, 0, keepdim=True),
                b.call(torch.amax, x, -1), b.call(torch.amin, x, 0), b.call(torch.var, x, -1))

    def center(b, x):
        m = b.call(torch.mean, x, -1, keepdim=True)
        return b.call(torch.sub, x, m)

    return [
        ("chain", chain, lambda dev, dt: (rnd(1000, 37, device=dev, dtype=dt), rnd(1000, 37, device=dev, dtype=dt))),
        ("broadcast", broadcast, lambda dev, dt: (rnd(64, 48, device=dev, dtype=dt), rnd(64, 1, device=dev, dtype=dt),
                                                  rnd(48, device=dev, dtype=dt))),
        ("strided", chain, lambda dev, dt: (rnd(48, 64, device=dev, dtype=dt).t(),
                                            rnd(64, 96, device=dev, dtype=dt)[:, ::2])),
        ("two_outputs", two_outputs, lambda dev, dt: (rnd(3, 5, 7, device=dev, dtype=dt), rnd(7, device=dev, dtype=dt))),
        ("mixed_int", mixed, lambda dev, dt: (rnd(40, 30, device=dev, dtype=dt),
                                              torch.randint(-5, 5, (40, 30), device=dev, dtype=torch.int32))),
        ("where_cmp", where_cmp, lambda dev, dt: (rnd(33, 65, device=dev, dtype=dt), rnd(33, 65, device=dev, dtype=dt))),
        ("softmax", softmax, lambda dev, dt: (rnd(37, 300, device=dev, dtype=dt),)),
        ("log_softmax_dim0", log_softmax_dim0, lambda dev, dt: (rnd(129, 20, device=dev, dtype=dt),)),
        ("ln_gelu", ln_gelu, lambda dev, dt: (rnd(2, 17, 96, device=dev, dtype=dt), rnd(2, 17, 96, device=dev, dtype=dt),
                                              rnd(96, device=dev, dtype=dt), rnd(96, device=dev, dtype=dt))),
        ("rms_silu", rms_silu, lambda dev, dt: (rnd(24, 200, device=dev, dtype=dt), rnd(200, device=dev, dtype=dt))),
        ("reductions", reductions, lambda dev, dt: (rnd(50, 70, device=dev, dtype=dt),)),
        ("center", center, lambda dev, dt: (rnd(31, 129, device=dev, dtype=dt),)),
    ]


def cases():
    """The shared correctness cases: [(name, program, factory(device, dtype))]."""
    return _cases()


TOLERANCE = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (6e-2, 6e-2)}


def check_case(backend, program, examples, dtype_name: str):
    """Compile ``program`` for ``examples`` and compare with eager; returns max abs error."""
    torch = adapter_for("torch").module
    region = build(program, *examples)
    kernel = backend.compile(region)
    got = kernel(*examples)
    want = eager(program, *examples)
    atol, rtol = TOLERANCE[dtype_name]
    worst = 0.0
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        torch.testing.assert_close(g.float(), w.float(), atol=atol, rtol=rtol, equal_nan=True)
        worst = max(worst, float((g.float() - w.float()).abs().max()) if g.numel() else 0.0)
    return worst, kernel


# ----------------------------------------------------------------------------- product path
def lowered_module(compiled: Any) -> Any:
    """The lowered GraphModule of a ``tensorplay_graph.compile`` result's first specialization."""
    runner = next(iter(compiled.specializations.values()))
    module = runner.lowered
    return getattr(module, "fn", module)  # a CudaGraphRunner wraps the module


def lowered_summary(compiled: Any) -> dict:
    """``{"kernels": [...], "eager": [...]}``: kernel calls and the other calls of the lowered graph.

    Lets tests and benchmarks assert that the product path really ran generated
    kernels (an all-eager graph would also match eager results).
    """
    import operator
    kernels, eager_nodes = [], []
    for node in lowered_module(compiled).graph.nodes:
        if node.op not in ("call_function", "call_method") or node.target is operator.getitem:
            continue
        kernel = node.meta.get("kernel")
        if kernel is not None:
            kernels.append(kernel.name)
        else:
            eager_nodes.append(node.name)
    return {"kernels": kernels, "eager": eager_nodes}


def as_function(program: Callable[..., Any], arity: int) -> Callable[..., Any]:
    """``program`` (builder style) as a plain function of ``arity`` named tensors, for capture."""
    wrappers = {
        1: lambda a: program(EAGER, a),
        2: lambda a, b: program(EAGER, a, b),
        3: lambda a, b, c: program(EAGER, a, b, c),
        4: lambda a, b, c, d: program(EAGER, a, b, c, d),
    }
    if arity not in wrappers:
        raise ValueError(f"as_function: {arity} inputs; programs here take 1 to 4")
    return wrappers[arity]
