"""The row copy of the padded GEMMs (``backends/row_copy.py``) in Triton's interpreter:
padded and misaligned rows, and the padded GEMM helpers built on it, against eager."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tensorplay_graph.backends import aligned_gemm, aligned_linear  # noqa: E402
from tensorplay_graph.backends import row_copy  # noqa: E402
from tensorplay_graph.backends.row_copy import copy_rows  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_copy_out_of_padded_rows_into_misaligned_rows(dtype):
    torch.manual_seed(0)
    rows, cols = 7, 1500  # two column blocks, the second partial; 1500 is no multiple of 8
    padded = torch.randn(rows, cols + 4).to(dtype)
    padded[:, cols:] = 5.0
    dense = torch.empty(rows, cols, dtype=dtype)
    assert row_copy._fits(dense, padded[:, :cols])  # the kernel runs, not the fallback
    copy_rows(dense, padded[:, :cols])
    assert torch.equal(dense, padded[:, :cols])
    # the other way round is torch's copy (measured faster on the H200)
    back = torch.zeros(rows, cols + 4, dtype=dtype)
    assert not row_copy._fits(back[:, :cols], dense)
    copy_rows(back[:, :cols], dense)
    assert torch.equal(back[:, :cols], dense) and not back[:, cols:].any()


@pytest.mark.parametrize("wide", [False, True])
def test_flat_copy_crosses_rows_inside_a_block(monkeypatch, wide):
    # The contiguous destination is copied in flat blocks of FLAT_BLOCK elements that span
    # several rows (the source row found by dividing by the width); rows x pitch past 2^31
    # takes 64-bit offsets (forced here by a smaller limit).
    monkeypatch.setattr(row_copy, "FLAT_BLOCK", 64)
    if wide:
        monkeypatch.setattr(row_copy, "_WIDE", 16)
    rows, cols = 9, 13
    padded = torch.arange(rows * 16, dtype=torch.float32).view(rows, 16)
    dense = torch.full((rows, cols), -1.0)
    copy_rows(dense, padded[:, :cols])
    assert torch.equal(dense, padded[:, :cols])


def test_padded_destination_rows_take_the_row_block_kernel():
    rows, cols = 5, 1500
    src = torch.randn(rows, cols + 4)
    dst = torch.zeros(rows, cols + 1)  # misaligned padded rows: not contiguous
    assert row_copy._fits(dst[:, :cols], src[:, :cols])
    copy_rows(dst[:, :cols], src[:, :cols])
    assert torch.equal(dst[:, :cols], src[:, :cols]) and not dst[:, cols:].any()


def test_other_layouts_fall_back_to_the_frameworks_copy():
    src = torch.randn(6, 5).t()  # column stride 5: not rows
    dst = torch.empty(5, 6)
    assert torch.equal(copy_rows(dst, src), src)


def test_padded_helpers_equal_eager_with_eager_layout():
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 16), torch.randn(13, 16)
    got = aligned_linear.padded_linear(x, w)
    want = torch.nn.functional.linear(x, w)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want)
    g = torch.randn(6, 13)
    shared = aligned_gemm.padded_columns(g)
    assert shared.shape == (6, 16) and torch.equal(shared[:, :13], g)
    assert not shared[:, 13:].any()
    a, h = torch.randn(6, 16), torch.randn(16, 13)
    got = aligned_gemm.aligned_matmul(a, h)  # N = 13: padded, then copied
    assert got.is_contiguous()
    torch.testing.assert_close(got, a @ h)
