"""Compiled training: forward and backward graphs through our passes and backends.

:mod:`.aot` -- ``torch.compile`` programs through AOTAutograd; :mod:`.torch_bridge`
-- our custom ops as opaque ``torch.library`` ops; :mod:`.decompositions` -- aten
backward ops rewritten into what prims express; :mod:`.report` -- what was fused.
"""

from .aot import aot_backend, compiled_programs, needs_autograd, programs_built, programs_since
from .report import LoweredRegion, TrainingProgram

__all__ = ["aot_backend", "compiled_programs", "needs_autograd", "programs_built", "programs_since",
           "LoweredRegion",
           "TrainingProgram"]
