"""The model benchmarks' shared measurement loop (``benchmarks/bench_modes.py``) on the CPU.

The GPU scripts themselves need an H200 (``benchmarks/models_gpu.py``,
``benchmarks/training_gpu.py``; ``training_gpu.py --smoke`` runs the whole path on the CPU
with one-layer models); here their loop, ratios, timing and command line run on stand-ins.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_modes  # noqa: E402

pytest.importorskip("torch")


def test_run_modes_measures_chosen_modes_in_order_and_turns_errors_into_rows():
    calls, seen = [], []

    def broken():
        raise RuntimeError("x" * 50)

    entry = {"eager": lambda: "E", "skipped": lambda: calls.append("built") or "S",
             "ours": broken, "inductor": lambda: "I"}

    def measure(fn, row):
        calls.append(fn)
        row["ms"] = {"E": 4.0, "I": 2.0}[fn]

    results = [{"model": "other", "mode": "eager", "ms": 1.0}]
    bench_modes.run_modes("m", entry, {"eager", "ours", "inductor"}, measure, results,
                          error_chars=10, trace_lines=2, after_row=seen.append)
    assert calls == ["E", "I"]  # "skipped" never built
    assert [r["mode"] for r in results[1:]] == ["eager", "ours", "inductor"] == \
        [r["mode"] for r in seen]
    error = results[2]
    assert error["ok"] is False and error["error"] == "RuntimeError: " + "x" * 10
    assert len(error["where"]) == 2 and "raise RuntimeError" in error["where"][-1]
    base = bench_modes.ratios(results, "m", {"eager": "vs_eager", "inductor": "vs_inductor"})
    assert set(base) == {"eager", "inductor"}
    assert (results[1]["vs_eager"], results[1]["vs_inductor"]) == (1.0, 0.5)
    assert (results[3]["vs_eager"], results[3]["vs_inductor"]) == (2.0, 1.0)
    assert "vs_eager" not in results[0] and "vs_eager" not in error


def test_median_ms_on_the_cpu_warms_up_then_times_one_call():
    calls = []
    ms = bench_modes.median_ms(lambda: calls.append(1), reps=20, device="cpu", warmup=3)
    assert len(calls) == 4 and ms >= 0.0


def test_cache_root_keeps_variables_already_set(monkeypatch, tmp_path):
    for var, _ in bench_modes.CACHE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TPG_CACHE_DIR", "/kept")
    root = bench_modes.use_cache_root("unused_", str(tmp_path))
    assert root == str(tmp_path) and os.environ["TPG_CACHE_DIR"] == "/kept"
    assert os.environ["TRITON_CACHE_DIR"] == os.path.join(str(tmp_path), "triton")


def test_parser_defaults_to_every_model():
    cli = bench_modes.parser({"gpt2": None, "llama": None}, "eager,ours", "phases")
    assert vars(cli.parse_args([])) == {"out": "out", "models": "gpt2,llama", "modes": "eager,ours"}
    assert vars(cli.parse_args(["--models", "gpt2", "--out", "o"]))["models"] == "gpt2"
