"""In-place ops on program-local tensors fuse; writes the caller can see keep eager semantics.

Every program runs compiled (reference / auto / interpreter) and eagerly on copies of the
same inputs; outputs and the inputs afterwards (mutations) must match.
"""

import operator

import pytest

import tensorplay_graph as tpg
from tensorplay_graph.ir.effects import is_inplace

BACKENDS = ["reference", "auto", "interpreter"]


def _copy(t):
    return t.clone()


# ----------------------------------------------------------------------------- programs
# Each takes (F, x, y) where F is the framework's nn.functional.

def chain_on_intermediate(F, x, y):
    h = x * 2
    h += y
    F.relu_(h)
    h.mul_(3)
    return h + 1


def inplace_module_flag(F, x, y):
    h = F.relu(x - y, inplace=True)
    return F.relu(h * 2, True) - 1


def reader_before_write(F, x, y):
    h = x + y
    early = h.exp()
    h.sub_(1)
    return early + h


def result_of_write_returned_twice(F, x, y):
    h = x * y
    g = h.add_(2)
    return g, h


def view_read_after_write(F, x, y):
    h = x + y
    v = h.reshape(-1)      # an alias of h: it must see the write
    h.mul_(2)
    return v * 1


def cast_alias(F, x, y):
    h = x + y
    g = h.float()          # float32 already: g is h itself
    g.relu_()
    return h * 1


def write_into_input(F, x, y):
    x.mul_(2)
    return x + y


def write_into_view_of_input(F, x, y):
    v = x.reshape(-1)
    v.add_(1)
    return v * y.reshape(-1)


def mixed_dtype_write(F, x, y):
    h = (x * 2).half()
    h += y                 # float16 += float32 stays float16: not rewritten
    return h * 1


PROGRAMS = [chain_on_intermediate, inplace_module_flag, reader_before_write,
            result_of_write_returned_twice, view_read_after_write, cast_alias,
            write_into_input, write_into_view_of_input, mixed_dtype_write]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_compiled_equals_eager_with_mutations(fw, program, backend):
    mod, F = fw.mod, fw.F
    mod.manual_seed(0)
    x, y = mod.randn(3, 5), mod.randn(3, 5)
    xe, ye = _copy(x), _copy(y)
    compiled = tpg.compile(lambda a, b: program(F, a, b), backend=backend)
    out, expected = compiled(x, y), program(F, xe, ye)
    out = out if isinstance(out, tuple) else (out,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(out, expected):
        fw.assert_close(got, want, 1e-3)
    for after, want in ((x, xe), (y, ye)):  # input mutations happened exactly once
        assert (fw.numpy(after) == fw.numpy(want)).all()


def _plan(fw, program, backend="reference"):
    mod, F = fw.mod, fw.F
    x, y = mod.randn(3, 5), mod.randn(3, 5)
    return tpg.explain(lambda a, b: program(F, a, b), x, y, backend=backend,
                       compile_kernels=False)


def test_writes_on_intermediates_become_one_region(fw):
    plan = _plan(fw, chain_on_intermediate)
    assert not plan.barriers, plan
    assert len(plan.regions) == 1 and len(plan.regions[0].nodes) == 5, plan
    assert not any(is_inplace(n) for n in plan.graph_module.graph.nodes)
    plan = _plan(fw, inplace_module_flag)
    assert not plan.barriers and len(plan.regions) == 1, plan


@pytest.mark.parametrize("program", [view_read_after_write, write_into_input,
                                     write_into_view_of_input, mixed_dtype_write],
                         ids=lambda p: p.__name__)
def test_visible_writes_stay_mutations(fw, program):
    plan = _plan(fw, program)
    assert "mutation" in plan.barrier_codes.values(), plan


@pytest.mark.parametrize("program", [reader_before_write, cast_alias], ids=lambda p: p.__name__)
def test_old_readers_and_same_dtype_casts_still_fuse(fw, program):
    # a same-dtype cast is the tensor itself (decompose drops it), so the write is on h
    plan = _plan(fw, program)
    assert not plan.barriers and len(plan.regions) == 1, plan


def test_operator_and_function_spellings_map_to_out_of_place():
    torch = pytest.importorskip("torch")
    from tensorplay_graph.passes.functionalize import out_of_place

    gm = tpg.capture(lambda a: torch.sigmoid_(operator.iadd(a * 1, 1)), torch.randn(4))
    nodes = {n.name: n for n in gm.graph.nodes}
    assert out_of_place(nodes["iadd"], "torch")[1] is operator.add
    assert out_of_place(nodes["sigmoid_"], "torch")[1] is torch.sigmoid
