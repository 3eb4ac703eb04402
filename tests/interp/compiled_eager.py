"""``compiled_equals_eager``: the Triton regression tests' check, compiled == torch eager bitwise."""

import torch

import tensorplay_graph as tpg
from tensorplay_graph.passes.pipeline import compile_graph


def compiled_equals_eager(program, *args, claimed: bool = True) -> None:
    """Compile ``program`` for the triton backend and compare it with torch eager: dtype, shape
    and every value (NaN for NaN, signed zeros and infs exact); each run gets fresh copies of
    ``args``. ``claimed``: the triton backend must have claimed a region."""
    gm = compile_graph(tpg.capture(program, *args), args, backends=["triton"])
    if claimed:
        assert any(n.meta.get("backend") == "triton" for n in gm.graph.nodes), "nothing was claimed"
    got, want = gm(*[a.clone() for a in args]), program(*[a.clone() for a in args])
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
