"""Convolution, inference batch norm, global average pooling and eval-mode dropout:
compiled equals eager (both frameworks), and explain() shows what fuses."""

import pytest

import tensorplay_graph as tpg
from tensorplay_graph import prims
from tensorplay_graph.frameworks import tensor_meta

BACKENDS = ["reference", "auto", "interpreter"]


def _frozen(module):
    """Eval mode, no parameter needing grad: the compiled program takes the kernel path."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module.eval()


def conv_block(mod, channels=4, bias=True, affine=True):
    nn = mod.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, channels, 3, padding=1, bias=bias)
            self.bn = nn.BatchNorm2d(channels, affine=affine)
            self.relu = nn.ReLU(inplace=True)
            self.pool = nn.AdaptiveAvgPool2d(1)

        def forward(self, x):
            return self.pool(self.relu(self.bn(self.conv(x)))) * 2

    block = Block()
    with _no_grad(mod):  # non-trivial running statistics
        block.bn.running_mean.copy_(mod.randn(channels) * 0.1)
        block.bn.running_var.copy_(mod.rand(channels) + 0.5)
    return _frozen(block)


def _no_grad(mod):
    return mod.no_grad()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", [dict(), dict(bias=False, affine=False)], ids=["affine", "plain"])
def test_conv_bn_relu_pool_matches_eager(fw, variant, backend):
    mod = fw.mod
    mod.manual_seed(0)
    block, x = conv_block(mod, **variant), mod.randn(2, 3, 6, 6)
    fw.assert_close(tpg.compile(block, backend=backend)(x), block(x))


def test_conv_bn_relu_plan_fuses_the_epilogue(fw):
    mod = fw.mod
    plan = tpg.explain(conv_block(mod), mod.randn(2, 3, 6, 6), backend="reference",
                       compile_kernels=False)
    region = plan.region_of("batch_norm_channels")
    assert region is not None and len(region.nodes) == 4, plan  # bn, relu, pool (mean), * 2
    assert plan.barrier_codes["conv2d"] == "unsupported"  # opaque, on the framework; no fence
    assert "mutation" not in plan.barrier_codes.values()
    assert not any(n.target == "reshape" and n.meta.get("region") is not None
                   for n in plan.graph_module.graph.nodes)


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5)], ids=["NC", "NCL"])
def test_batch_norm_1d_in_eval_matches_eager(fw, shape):
    mod = fw.mod
    mod.manual_seed(1)
    bn = mod.nn.BatchNorm1d(3)
    with _no_grad(mod):
        bn.running_mean.copy_(mod.randn(3))
        bn.running_var.copy_(mod.rand(3) + 0.1)
        bn.weight.copy_(mod.randn(3))
    bn = _frozen(bn)
    x = mod.randn(*shape)
    plan = tpg.explain(lambda v: bn(v).relu(), x, backend="reference", compile_kernels=False)
    assert [r.nodes for r in plan.regions] == [["batch_norm_channels", "relu"]], plan
    fw.assert_close(tpg.compile(lambda v: bn(v).relu(), backend="reference")(x), bn(x).relu())


def test_batch_norm_in_training_is_a_fence_and_matches_eager(fw):
    mod = fw.mod
    mod.manual_seed(2)
    bn = _frozen(mod.nn.BatchNorm2d(3)).train()
    x = mod.randn(2, 3, 4, 4)
    plan = tpg.explain(lambda v: bn(v) + 1, x, backend="reference", compile_kernels=False)
    assert plan.barrier_codes["batch_norm"] == "side_effect", plan  # it writes running stats
    fw.assert_close(tpg.compile(lambda v: bn(v) + 1, backend="reference")(x), bn(x) + 1)


def test_batch_norm_in_training_updates_running_stats_once_per_call(fw):
    mod = fw.mod
    bn, eager = _frozen(mod.nn.BatchNorm2d(3)).train(), _frozen(mod.nn.BatchNorm2d(3)).train()
    compiled = tpg.compile(lambda v: bn(v) + 1, backend="reference")
    x = mod.randn(2, 3, 4, 4)
    compiled(x), eager(x)
    fw.assert_close(bn.running_mean, eager.running_mean, 1e-6)


def _dropouts(mod, training, variants=True):
    F = mod.nn.functional

    def program(x):
        h = F.dropout(x * 2, 0.3, training=training)
        if variants:
            h = F.dropout2d(h.exp(), 0.3, training=training)
            return F.alpha_dropout(h, 0.2, training=training) + 1
        return h.exp() + 1
    return program


def test_eval_dropout_is_the_identity(fw):
    mod = fw.mod
    x = mod.randn(2, 3, 4, 4)
    program = _dropouts(mod, training=False)
    plan = tpg.explain(program, x, backend="reference", compile_kernels=False)
    assert not plan.barriers and [r.nodes for r in plan.regions] == [["mul", "exp", "add"]], plan
    fw.assert_close(tpg.compile(program, backend="reference")(x), program(x))
    layer = mod.nn.Dropout(0.5).eval()
    assert not tpg.explain(lambda v: layer(v) * 3, x, backend="reference").barriers


def test_training_dropout_stays_a_random_fence(fw):
    mod = fw.mod
    # TensorPlay's dropout2d / alpha_dropout are Python code over other ops, not one call
    variants = fw.name == "torch"
    plan = tpg.explain(_dropouts(mod, True, variants), mod.randn(2, 3, 4, 4), backend="reference",
                       compile_kernels=False)
    assert sorted(plan.barrier_codes.values()) == ["random"] * (3 if variants else 1), plan


def test_global_average_pool_is_a_mean_and_other_sizes_are_not(fw):
    mod = fw.mod
    F = mod.nn.functional
    x = mod.randn(2, 3, 5, 4)
    node_prims = {}
    for name, program in {"pool1": lambda v: F.adaptive_avg_pool2d(v.exp(), (1, 1)),
                          "pool1d": lambda v: F.adaptive_avg_pool1d(v.reshape(6, 5, 4).exp(), 1),
                          "pool2": lambda v: F.adaptive_avg_pool2d(v.exp(), 2)}.items():
        gm = tpg.capture(program, x)
        found = [prims.lookup(n, fw.name) for n in gm.graph.nodes if "adaptive" in n.name]
        node_prims[name] = found[0] and found[0][0].name
        fw.assert_close(tpg.compile(program, backend="reference")(x), program(x))
    assert node_prims == {"pool1": "mean", "pool1d": "mean", "pool2": None}


CONV_CASES = [((2, 3, 9, 7), (4, 3, 3, 3), dict()),
              ((2, 4, 9, 7), (6, 2, 3, 2), dict(stride=2, padding=1, groups=2)),
              ((3, 9, 7), (4, 3, 3, 3), dict(dilation=2, padding=(2, 1))),
              ((2, 3, 8, 8), (4, 3, 3, 3), dict(padding="same")),
              ((2, 3, 11), (5, 3, 4), dict(stride=3))]


@pytest.mark.parametrize("x_shape,w_shape,kw", CONV_CASES)
def test_conv_meta_rule_matches_eager(fw, x_shape, w_shape, kw):
    mod = fw.mod
    if fw.name == "tensorplay" and (kw.get("padding") == "same" or
                                      isinstance(kw.get("padding"), tuple)):
        kw = dict(kw, padding=1)  # TensorPlay 1.0 rejects these paddings eagerly
    if fw.name == "tensorplay" and len(x_shape) < len(w_shape):
        x_shape = (1,) + x_shape  # ... and unbatched input
    conv = getattr(mod.nn.functional, f"conv{len(w_shape) - 2}d")
    x, w = mod.randn(*x_shape), mod.randn(*w_shape)
    got = prims.get(f"conv{len(w_shape) - 2}d").meta(tensor_meta(x), tensor_meta(w), **kw)
    want = tensor_meta(conv(x, w, **kw))
    assert (got.shape, got.dtype) == (want.shape, want.dtype)


def test_flatten_meta_rule_matches_eager(fw):
    mod = fw.mod
    x = mod.randn(2, 3, 4, 5)
    for args in [(), (1,), (1, 2), (-3, -2)]:
        got = prims.get("flatten").meta(tensor_meta(x), *args)
        assert got.shape == tuple(mod.flatten(x, *args).shape)
