"""The padded GEMMs' row copy on the GPU: ``copy_rows`` against torch's ``copy_``.

    source benchmarks/gpu_setup.sh && python benchmarks/row_copy_gpu.py

GPT-2's logits (4096 x 50257 bf16) out of rows padded to 50264 and back; each line: ms of
``copy_rows`` and of ``dst.copy_(src)`` (median of CUDA-event timings) and the bandwidth as
a fraction of a contiguous copy of the same bytes measured in the same run.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from bench_modes import median_ms  # noqa: E402
from tensorplay_graph.backends.row_copy import copy_rows  # noqa: E402


def main():
    rows, cols, pad = 4096, 50257, 7
    padded = torch.randn(rows, cols + pad, device="cuda").to(torch.bfloat16)
    dense = torch.empty(rows, cols, device="cuda", dtype=torch.bfloat16)
    flat_a, flat_b = torch.empty_like(dense), torch.empty_like(dense)
    base = median_ms(lambda: flat_a.copy_(flat_b), reps=50)
    for name, dst, src in (("out of padded rows", dense, padded[:, :cols]),
                           ("into padded rows", padded[:, :cols], dense)):
        ours = median_ms(lambda: copy_rows(dst, src), reps=50)
        torch_ms = median_ms(lambda: dst.copy_(src), reps=50)
        copy_rows(dst, src)
        assert torch.equal(dst, src)
        print(json.dumps({"copy": name, "copy_rows_ms": round(ours, 4), "torch_copy_ms":
                          round(torch_ms, 4), "contiguous_copy_ms": round(base, 4),
                          "vs_torch": round(torch_ms / ours, 3),
                          "of_copy_bandwidth": round(base / ours, 3)}), flush=True)


if __name__ == "__main__":
    main()
