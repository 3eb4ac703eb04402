"""Compile is not silent: INFO lines with durations on the compile channel, bars in a terminal."""

import io
import logging
import threading

import pytest

from tensorplay_graph.progress import bar_enabled, progress, tracked

COMPILE = "tensorplay_graph.compile"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def compile_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == COMPILE]


def test_info_line_names_the_step_its_count_and_duration(caplog, monkeypatch):
    monkeypatch.setenv("TPG_PROGRESS", "0")
    with caplog.at_level(logging.INFO, logger=COMPILE):
        with progress("building kernels", total=3) as step:
            step()
            step(2)
            step.detail = "1 from the cache"
        with progress("capturing f"):
            pass
    lines = compile_lines(caplog)
    assert lines[0].startswith("building kernels (3/3; 1 from the cache): ")
    assert lines[0].endswith(" s") and float(lines[0].split(": ")[1][:-2]) >= 0
    assert lines[1].startswith("capturing f: ")


def test_a_failed_step_says_so(caplog):
    with caplog.at_level(logging.INFO, logger=COMPILE), pytest.raises(KeyError):
        with progress("building kernels", total=2) as step:
            step()
            raise KeyError("boom")
    assert compile_lines(caplog)[0].startswith("building kernels (1/2; failed): ")


def test_tracked_counts_every_item_even_skipped_ones(caplog, monkeypatch):
    monkeypatch.setenv("TPG_PROGRESS", "0")
    seen = []
    with caplog.at_level(logging.INFO, logger=COMPILE):
        for item in tracked(range(4), "autotuning", unit="config"):
            if item % 2:
                continue
            seen.append(item)
    assert seen == [0, 2]
    assert compile_lines(caplog)[0].startswith("autotuning (4/4): ")


def test_bar_only_in_a_terminal_for_several_items(monkeypatch):
    monkeypatch.delenv("TPG_PROGRESS", raising=False)
    assert bar_enabled(3, Terminal())
    assert not bar_enabled(3, io.StringIO())          # a pipe / file / CI log
    assert not bar_enabled(1, Terminal())             # one kernel: no bar
    assert not bar_enabled(None, Terminal())          # an untimed step
    monkeypatch.setenv("TPG_PROGRESS", "0")
    assert not bar_enabled(3, Terminal())
    monkeypatch.setenv("TPG_PROGRESS", "1")
    assert bar_enabled(3, io.StringIO())


def test_bar_is_drawn_on_stderr_and_steps_are_thread_safe(monkeypatch, capsys):
    pytest.importorskip("tqdm")
    monkeypatch.setenv("TPG_PROGRESS", "1")
    with progress("building kernels", total=64) as step:
        threads = [threading.Thread(target=lambda: [step() for _ in range(8)]) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert step.done == 64
    err = capsys.readouterr().err
    assert "building kernels" in err and "/64" in err  # the bar, cleared when done (leave=False)


def test_compile_logs_capture_planning_and_kernel_builds(caplog, monkeypatch):
    torch = pytest.importorskip("torch")
    import tensorplay_graph as tpg
    monkeypatch.setenv("TPG_PROGRESS", "0")

    def fn(x):
        return torch.relu(x + 1), x.sum(0).exp()

    compiled = tpg.compile(fn, backend="reference")
    x = torch.randn(4, 4)
    with caplog.at_level(logging.INFO, logger=COMPILE):
        got = compiled(x)
    for g, e in zip(got, fn(x)):
        assert torch.allclose(g, e)
    lines = compile_lines(caplog)
    assert any(line.startswith("capturing fn (") and "nodes" in line for line in lines), lines
    assert any(line.startswith("planning (normalize,") for line in lines), lines
    lowered = next(iter(compiled.specializations.values())).lowered
    kernels = sum("kernel" in n.meta for n in lowered.graph.nodes)
    assert kernels >= 2
    assert any(line.startswith(f"building kernels ({kernels}/{kernels})") for line in lines), lines
