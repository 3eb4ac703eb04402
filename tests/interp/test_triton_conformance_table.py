"""The per-prim conformance table on Triton (interpreter; torch programs, float32 / float16).

Small budget: a deterministic sample of prims (TPG_CONFORMANCE_FULL=1: all). Prims listed
for Triton in tests/conformance/KNOWN_BACKEND_GAPS.md are not sampled until fixed.
"""

import logging
import os
import sys

import pytest


sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "conformance"))
import conformance_table as ct  # noqa: E402
from tensorplay_graph import prims  # noqa: E402

BUDGET = 4


def _cases():
    cases = [(p.name, d) for p in prims.all_prims() if "triton" in p.lowerings
             for d in ("float32", "float16")
             if ct.FULL or (p.name, "triton") not in ct.KNOWN_GAPS]
    return ct.select(cases, BUDGET, key=str)


@pytest.mark.parametrize("prim_name,dtype", _cases())
def test_triton_matches_eager(prim_name, dtype):
    logging.disable(logging.WARNING)
    try:
        _, failures = ct.run_case(prims.get(prim_name), ct.Framework("torch"), dtype, "triton",
                                  labels=ct.CORE_LABELS)
    finally:
        logging.disable(logging.NOTSET)
    assert not failures, "\n".join(failures)
