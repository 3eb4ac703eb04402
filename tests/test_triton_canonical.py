"""Canonical Triton sources: kernels differing only in value names compile once."""

from tensorplay_graph.backends.triton.canonical import canonical

LAYER = '''# rows kernel for {p}layer_norm
import triton
import triton.language as tl


@triton.jit
def tpg_rows_r{r}_k0(
    {p}x_ptr, {p}out_ptr, n_cols, {p}x_stride0,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    {p}x = tl.load({p}x_ptr + row * {p}x_stride0 + cols, mask=mask, other=0)
    # {p}layer_norm
    {p}mean = tl.sum(tl.where(mask, {p}x, 0.0), axis=0) / {n}
    tl.store({p}out_ptr + row * n_cols + cols, {p}x - {p}mean, mask=mask)
'''


def test_layers_differing_in_names_share_one_source():
    name1, text1 = canonical("tpg_rows_r3_k0", LAYER.format(p="h0_", r=3, n="64.0"))
    name2, text2 = canonical("tpg_rows_r9_k0", LAYER.format(p="h1_", r=9, n="64.0"))
    assert (name1, text1) == (name2, text2) and name1.startswith("tpg_rows_")
    other, _ = canonical("tpg_rows_r3_k0", LAYER.format(p="h0_", r=3, n="128.0"))
    assert other != name1                                  # a different constant: its own
    for kept in ("tl.load", "mask=", "other=", "axis=", "BLOCK_N", "tl.constexpr", "@triton.jit"):
        assert kept.replace(".", " .").replace("=", " =") in text1 or kept in text1, kept
    assert "h0_" not in text1 and "#" not in text1


def test_canonical_source_is_valid_python_defining_the_name():
    name, text = canonical("tpg_rows_r0_k0", LAYER.format(p="", r=0, n="8.0").replace(
        "import triton\nimport triton.language as tl\n", ""))
    code = compile(text, "<canonical>", "exec")
    assert name in code.co_names and name.startswith("tpg_rows_")


def test_text_that_does_not_tokenize_is_kept():
    assert canonical("k", "def k(:\n  '''") == ("k", "def k(:\n  '''")
