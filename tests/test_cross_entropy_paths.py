"""The two cross-entropy decompositions take the same calls and reduce them the same way.

``decompose`` (no gradient) rewrites ``F.cross_entropy`` into ``cross_entropy_rows`` + the
mean / sum; the joint graph (logits that need a gradient) into ``logsumexp - x[target]`` as
plain prims (``prims/losses.py`` says why the per-row part differs). Both ask
``plain_reduction`` which calls they take: each call here is checked on both paths, with
loss and gradients against eager and the rewrite (or its absence) seen in the graph.
"""

from __future__ import annotations

import warnings

import pytest

import tensorplay_graph as tpg
from tensorplay_graph import prims
from tensorplay_graph.capture import capture
from tensorplay_graph.frameworks import tensor_meta
from tensorplay_graph.ir import Graph
from tensorplay_graph.passes.decompose_losses import decompose_cross_entropy
from tensorplay_graph.passes.pipeline import compile_graph
from tensorplay_graph.prims.losses import plain_reduction
from tensorplay_graph.training.joint import build_joint

torch = pytest.importorskip("torch")
F = torch.nn.functional
OPTIONS = {"backends": ["reference"]}

#: (id, cross_entropy keyword arguments, whether both paths decompose the call)
CALLS = [
    ("mean", {}, True),
    ("sum", {"reduction": "sum"}, True),
    ("none", {"reduction": "none"}, True),
    ("ignore_index", {"ignore_index": 2}, True),
    ("legacy size_average=False", {"size_average": False}, True),
    ("legacy reduce=False", {"reduce": False}, True),
    ("weight", {"weight": torch.linspace(0.5, 2.0, 5, dtype=torch.float64)}, False),
    ("label_smoothing", {"label_smoothing": 0.1}, False),
]


def _inputs(kwargs=None):
    torch.manual_seed(0)
    x = torch.randn(6, 5, dtype=torch.float64)
    t = torch.tensor([0, 4, 2, (kwargs or {}).get("ignore_index", -100), 1, 3])
    return x, t


def _loss(kwargs):
    def f(x, t):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the legacy flags' deprecation
            out = F.cross_entropy(x, t, **kwargs)
        return out.sum() if out.ndim else out
    return f


@pytest.mark.parametrize("kwargs,decomposes", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_inference_path_matches_eager(kwargs, decomposes):
    f, (x, t) = _loss(kwargs), _inputs(kwargs)
    lowered = compile_graph(capture(f, x, t), (x, t), backends=["reference"])
    torch.testing.assert_close(lowered(x, t), f(x, t), rtol=1e-10, atol=1e-12)
    assert ("cross_entropy_rows" in lowered.code) == decomposes, lowered.code


@pytest.mark.parametrize("kwargs,decomposes", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_training_path_matches_eager(kwargs, decomposes):
    f, (x, t) = _loss(kwargs), _inputs(kwargs)
    x.requires_grad_(True)
    joint = build_joint(capture(f, x, t), (x, t))
    assert joint.opaque == ([] if decomposes else ["cross_entropy"])
    want = f(x, t)
    (want_grad,) = torch.autograd.grad(want, x)
    got = tpg.compile(f, options=OPTIONS)(x, t)
    (grad,) = torch.autograd.grad(got, x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-10, atol=1e-12)


def _placeholders(x, t):
    graph = Graph()
    a, target = graph.placeholder("a"), graph.placeholder("target")
    a.meta["tensor_meta"], target.meta["tensor_meta"] = tensor_meta(x), tensor_meta(t)
    return graph, a, target


@pytest.mark.parametrize("kwargs,decomposes", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_plain_reduction_follows_torchs_legacy_flags(kwargs, decomposes):
    _, a, target = _placeholders(*_inputs())
    args = prims.get("cross_entropy").bind((a, target), kwargs)
    legacy = {"size_average", "reduce"} & set(kwargs)
    want = torch.nn._reduction.legacy_get_string(kwargs.get("size_average"), kwargs.get("reduce")) \
        if legacy else kwargs.get("reduction", "mean")
    assert plain_reduction(args) == (want if decomposes else None)


def test_refused_meta_rule_leaves_the_graph_as_it_was():
    """A target not shaped like the rows: ``cross_entropy_rows``'s meta rule refuses, and the
    nodes already inserted for the rewrite are taken out again."""
    x, _ = _inputs()
    graph, a, target = _placeholders(x, torch.zeros(3, dtype=torch.int64))
    loss = graph.call_function(F.cross_entropy, (a, target), {"reduction": "mean"})
    loss.meta["prim"] = prims.get("cross_entropy")
    loss.meta["prim_args"] = loss.meta["prim"].bind((a, target), {"reduction": "mean"})
    graph.output(loss)
    before = [n.format_node() for n in graph.nodes]
    assert decompose_cross_entropy(loss, "torch") is False
    assert [n.format_node() for n in graph.nodes] == before
