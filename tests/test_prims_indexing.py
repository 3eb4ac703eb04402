"""Basic-slice index arithmetic (``prims/indexing.py``) against numpy's own slicing."""

import numpy as np
import pytest

from tensorplay_graph.errors import ShapeError
from tensorplay_graph.prims.indexing import basic_slices, full_index, index_items, narrowed

SHAPE = (3, 4, 5)
SLICE_INDEXES = [
    slice(None), (slice(None), slice(0, None)), (Ellipsis, slice(0, 2)), (slice(1, 3), Ellipsis),
    (slice(None), slice(-4, None), slice(None, 5)), (Ellipsis,), (slice(0, 10), slice(None)),
    (slice(None), slice(None), slice(2, 2)), (slice(None, -1), Ellipsis, slice(1, None)),
]


@pytest.mark.parametrize("index", SLICE_INDEXES, ids=repr)
def test_narrowed_dims_match_numpy(index):
    x = np.arange(np.prod(SHAPE)).reshape(SHAPE)
    y = x[index]
    expected = tuple(d for d in range(len(SHAPE)) if y.shape[d] != SHAPE[d])
    assert narrowed(index, SHAPE) == expected
    assert full_index(index, SHAPE) == (y.shape == SHAPE)
    slices = basic_slices(index, len(SHAPE))
    assert np.array_equal(x[slices], y)


@pytest.mark.parametrize("index", [0, (slice(None), 1), (None, Ellipsis), (Ellipsis, Ellipsis),
                                   (slice(None),) * 4, (slice(None, None, 2),)], ids=repr)
def test_anything_but_step_one_slices_is_not_narrowing(index):
    assert narrowed(index, SHAPE) is None
    assert not full_index(index, SHAPE)


@pytest.mark.parametrize("index", [(0, Ellipsis), (None, slice(1, 3)), (Ellipsis, None, -1),
                                   (slice(None), None, 2, Ellipsis), 1, ()], ids=repr)
def test_index_items_select_what_numpy_selects(index):
    x = np.arange(np.prod(SHAPE)).reshape(SHAPE)
    items = index_items(index, len(SHAPE))
    assert sum(1 for i in items if i is not None) == len(SHAPE) and Ellipsis not in items
    assert np.array_equal(x[tuple(items)], x[index])


@pytest.mark.parametrize("index", [(Ellipsis, 0, Ellipsis), (0, 0, 0, 0)], ids=repr)
def test_index_items_refuses_what_numpy_refuses(index):
    with pytest.raises(IndexError):
        np.zeros(SHAPE)[index]
    with pytest.raises(ShapeError, match="is invalid for a 3-d tensor"):
        index_items(index, len(SHAPE))
