"""Self-contained repro snippets for gradient-fuzz failures, and the shrinking entry point.

A repro is the program's text plus its input builder and custom ops (as
:func:`fuzz_program.repro_source` writes for the forward fuzzer), a module when the
program holds parameters, and a driver that runs eager and compiled training calls and
prints each output and each leaf's ``.grad``.
"""

from __future__ import annotations

import inspect
import re
from typing import Tuple

from fuzz_check import Outcome, shrink
from fuzz_program import CUSTOM_OPS_SRC, Program, device_source, make_input

ENTRY_SOURCE = {
    "reference": "tpg.compile({target}, backend='reference')",
    "auto": "tpg.compile({target}, backend='auto')",
    "triton": "tpg.compile({target}, backend='triton')",
    ("framework", "torch"): "T.compile({target}, backend='tensorplay_graph', "
                            "options={{'backends': ['reference']}}, dynamic=False)",
    ("framework", "tensorplay"): "T.compile({target}, backend='tensorplay_graph', "
                                 "options={{'backends': ['reference']}})",
}

DRIVER = '''
def run(f):
    args = [a.requires_grad_(True) if n in GRAD else a for n, a in zip(ARGS, inputs())
            if n not in PARAMS]
    outs = f(*args)
    loss = backward_loss(outs, {seed}, {every_output})
    if loss is not None:
        loss.backward()
    leaves = [a for a in args if getattr(a, "requires_grad", False)]
    return outs, [a.grad for a in leaves] + [getattr(TARGET, n).grad for n in PARAMS]


expected = run(TARGET)
{reset}got = run({compiled})
for e, g in zip(expected[0] + tuple(expected[1]), got[0] + tuple(got[1])):
    print(e)
    print(g)
'''


def grad_repro_source(program: Program, entry: str, note: str = "") -> str:
    """A runnable snippet: definitions, the program, eager vs compiled outputs and grads."""
    from grad_check import Harness, backward_loss, module_source
    from grad_gen import GRAD_OPS_SRC, requires_grad
    h = Harness(program, entry)
    parts = [f"# gradient fuzz repro: framework={program.framework} entry={entry} "
             f"seed={program.seed}\n"]
    if note:
        parts += ["".join(f"# {line}\n" for line in note.strip().splitlines())]
    parts += ["from typing import Any, Optional, Tuple\n\nimport numpy as np\n", program.header(), "import tensorplay_graph as tpg\n\n\n"]
    if program.uses_custom_ops():
        parts += [CUSTOM_OPS_SRC.format(fw=program.framework), "\n\n"]
    if "fuzz_gaffine" in program.body():
        parts += [GRAD_OPS_SRC.format(fw=program.framework), "\n\n"]
    parts += [inspect.getsource(make_input), "\n\n", device_source(),
              inspect.getsource(backward_loss), "\n\n",
              "def module_of(t):\n    return T\n\n\n",
              "def differentiable(t):\n    return getattr(t, 'requires_grad', False) and "
              "t.dtype in (T.float32, T.float16, T.bfloat16)\n\n\n",
              program.inputs_source(), "\n\n", program.body(), "\n\n"]
    params = list(h.params)
    parts += [f"ARGS = {[s.name for s in program.inputs]!r}\n",
              f"GRAD = {[s.name for s in program.inputs if requires_grad(s)]!r}\n",
              f"PARAMS = {params!r}\n"]
    if params:
        parts += [module_source(program, params), "\n\n",
                  "values = dict(zip(ARGS, inputs()))\n",
                  "TARGET = Net({n: values[n] for n in PARAMS})\n"]
    else:
        parts += ["TARGET = program\n"]
    key = entry if entry in ENTRY_SOURCE else (entry, program.framework)
    compiled = ENTRY_SOURCE[key].format(target="TARGET")
    reset = "".join(f"TARGET.{n}.grad = None\n" for n in params)
    parts += [DRIVER.format(seed=program.seed, compiled=compiled, reset=reset,
                            every_output=h.every_output)]
    return re.sub(r"\n{4,}", "\n\n\n", "".join(parts))


def shrink_grad(program: Program, entry: str, outcome: Outcome, budget_s: float
                ) -> Tuple[Program, Outcome]:
    """:func:`fuzz_check.shrink` with the gradient checker."""
    from grad_check import check_grad
    return shrink(program, entry, outcome, budget_s, checker=lambda p: check_grad(p, entry))
