"""TPG_LOGS / set_logs: each channel reports what it names."""

import logging
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import tensorplay_graph as tpg
from tensorplay_graph import logs


@pytest.fixture(autouse=True)
def _reset_channels():
    yield
    logs.set_logs(**{name: False for name in logs.CHANNELS})


def test_set_logs_levels_and_unknown_names():
    logs.set_logs(recompiles=True, graph=True)
    assert logging.getLogger("tensorplay_graph.recompiles").level == logging.INFO
    assert logging.getLogger("tensorplay_graph.graph").level == logging.DEBUG
    with pytest.raises(ValueError, match="did you mean 'fusion'"):
        logs.set_logs(fuson=True)


def test_recompiles_channel_names_the_change_and_warns_near_the_limit(caplog):
    f = tpg.compile(lambda x: x + 1, backend="interpreter",
                    options={"recompile_limit": 3}, dynamic=False)
    with caplog.at_level(logging.INFO, logger="tensorplay_graph.recompiles"):
        for dtype in (torch.float32, torch.float64, torch.int32):
            f(torch.ones(3, dtype=dtype))
    records = [r for r in caplog.records if r.name == "tensorplay_graph.recompiles"]
    assert [r.levelno for r in records] == [logging.INFO, logging.WARNING]
    assert "dtype" in records[0].getMessage()


def test_graph_channel_prints_the_captured_graph(caplog):
    logs.set_logs(graph=True)
    with caplog.at_level(logging.DEBUG, logger="tensorplay_graph.graph"):
        tpg.compile(lambda x: torch.sigmoid(x) * 3, backend="interpreter")(torch.ones(2))
    assert any("sigmoid" in r.getMessage() for r in caplog.records
               if r.name == "tensorplay_graph.graph")


def test_tpg_logs_env_reaches_stderr():
    code = ("import torch, tensorplay_graph as tpg\n"
            "f = tpg.compile(lambda x: x * 2, backend='interpreter', dynamic=False)\n"
            "f(torch.ones(2)); f(torch.ones(2, dtype=torch.float64))\n")
    env = dict(os.environ, TPG_LOGS="recompiles")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "recompiling" in out.stderr and "tensorplay_graph.recompiles" in out.stderr
    bad = subprocess.run([sys.executable, "-c", "import tensorplay_graph"],
                         env=dict(os.environ, TPG_LOGS="recompile"), capture_output=True, text=True)
    assert bad.returncode != 0 and "did you mean 'recompiles'" in bad.stderr
