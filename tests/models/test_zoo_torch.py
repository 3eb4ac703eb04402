"""transformers models through torch.compile(backend="tensorplay_graph") and
tensorplay_graph.compile.

Each cell compares the compiled model with its eager run (outputs, output types, and in grad
mode the gradients of a scalar loss); see harness.py. The cell list is zoo.cells().
"""

from __future__ import annotations

import pytest

from .harness import check
from .upstream import zoo_params


@pytest.mark.parametrize("spec, entry, mode, backend", zoo_params("torch"))
def test_compiled_equals_eager(spec, entry, mode, backend):
    check(spec, entry, mode, backend)
