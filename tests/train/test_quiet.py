"""A quiet, honest terminal: a real `mleforge train` run's stderr holds mleforge's progress and
none of the libraries' warnings or progress bars; the libraries' settings are back after."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from rich.console import Console
from rich.progress import Progress

from mleforge.utils.plain_progress import PlainTicker, clock
from mleforge.utils.quiet import quiet_libraries

ROOT = Path(__file__).resolve().parents[2]
NOISE = re.compile(r"FutureWarning|UserWarning|DeprecationWarning|Loading weights|it/s\]|s/it\]|\d+%\|")


def test_a_short_train_run_prints_no_library_warnings_or_bars(tiny, titanic, journals, tmp_path):
    pytest.importorskip("trl")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for name in ("MLEFORGE_VERBOSE", "PYTHONWARNINGS", "TRL_EXPERIMENTAL_SILENCE"):
        env.pop(name, None)  # a user's normal run
    command = [sys.executable, "-m", "mleforge", "train", "--model", f"hf:{tiny}", "--tasks", "titanic",
               "--eval-tasks", "", "--steps", "1", "--group-size", "2", "--max-new-tokens", "8", "--sft", "none",
               "--journals", str(journals), "--stepwise.enabled", "off", "--sandbox.executor", "local",
               "--run-dir", str(tmp_path / "run")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not NOISE.search(done.stderr), done.stderr
    # what is left is mleforge's own: the progress (its last state, stderr being no terminal) and the report
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert any(line.startswith(f"train hf:{tiny}") and "1/1" in line for line in lines), done.stderr
    assert any(line.startswith("report: ") for line in lines[-2:]), done.stderr


def test_quiet_libraries_silences_only_the_libraries_and_restores_their_settings():
    transformers = pytest.importorskip("transformers")
    tlog = transformers.utils.logging
    before = (tlog.get_verbosity(), tlog.is_progress_bar_enabled(), logging.getLogger("trl").level)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_libraries():
            assert not tlog.is_progress_bar_enabled() and tlog.get_verbosity() == logging.ERROR
            warnings.warn_explicit("old", FutureWarning, "modeling_utils.py", 1, module="transformers.modeling_utils")
            warnings.warn_explicit("exp", UserWarning, "grpo_trainer.py", 1, module="trl.trainer.grpo_trainer")
            warnings.warn("ours", UserWarning, stacklevel=1)  # mleforge's (this test's) own: shown
            warnings.warn_explicit("deprecated", FutureWarning, "other.py", 1, module="sklearn.base")
        warnings.warn_explicit("after", FutureWarning, "modeling_utils.py", 1, module="transformers.modeling_utils")
    assert [str(w.message) for w in caught] == ["ours", "deprecated", "after"]
    assert (tlog.get_verbosity(), tlog.is_progress_bar_enabled(), logging.getLogger("trl").level) == before


def test_the_gguf_loaders_own_bar_is_off_inside_and_back_after(capsys):
    """transformers' GGUF loader draws its bar with tqdm itself, past transformers' switch
    (a fresh clone's first use of a bundled model printed it)."""
    pytest.importorskip("transformers")
    gguf_utils = pytest.importorskip("transformers.modeling_gguf_pytorch_utils")
    original = gguf_utils.tqdm
    with quiet_libraries():
        list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
    assert "de-quantizing" not in capsys.readouterr().err
    assert gguf_utils.tqdm is original
    list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."))
    assert "de-quantizing" in capsys.readouterr().err


def test_threads_leaving_out_of_order_restore_the_settings_once_the_last_leaves():
    """A enters, B enters, A leaves (B's work stays quiet), B leaves (all as before)."""
    transformers = pytest.importorskip("transformers")
    tlog = transformers.utils.logging

    def settings():
        return list(warnings.filters), tlog.get_verbosity(), tlog.is_progress_bar_enabled(), logging.getLogger("trl").level

    before = settings()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with quiet_libraries():
            a_in.set()
            assert b_in.wait(30)
        a_out.set()

    def second():
        assert a_in.wait(30)
        with quiet_libraries():
            b_in.set()
            assert a_out.wait(30)
            seen["b alone"] = settings()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    _, verbosity, bars, trl = seen["b alone"]
    assert (verbosity, bars, trl) == (logging.ERROR, False, logging.ERROR)
    assert settings() == before


def test_verbose_leaves_the_libraries_alone(monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("MLEFORGE_VERBOSE", "1")
    with quiet_libraries():
        assert transformers.utils.logging.is_progress_bar_enabled()


def bar(console):
    progress = Progress(console=console)
    progress.add_task("train hf:model", total=4, completed=1, figures="reward 0.500")
    return progress


class Clock:
    """The ticker's clock, driven by the test: `intervals` intervals pass, then the ticker is
    stopped (its wait returns True) and `done` is set."""

    def __init__(self, intervals: int):
        self.intervals, self.waits, self.done = intervals, [], threading.Event()

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        if len(self.waits) <= self.intervals:
            return False
        self.done.set()
        return True


def test_a_log_gets_a_plain_line_every_interval():
    out = io.StringIO()
    progress = bar(Console(file=out, force_terminal=False, width=200))
    ticks = Clock(intervals=3)
    ticker = PlainTicker(progress, progress.console, interval_s=5.0, wait=ticks.wait)
    ticker.start()
    assert ticks.done.wait(timeout=30)
    ticker.stop()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and ticks.waits == [5.0] * 4  # one line per interval passed
    for line in lines:
        assert re.fullmatch(r"train hf:model: 1/4, 0:00:\d\d elapsed, ETA (-:--:--|\d:\d\d:\d\d)  reward 0.500", line)


def test_a_stopped_ticker_prints_nothing_more():
    out = io.StringIO()
    progress = bar(Console(file=out, force_terminal=False, width=200))
    ticker = PlainTicker(progress, progress.console, interval_s=3600.0)
    ticker.start()
    ticker.stop()  # ends the hour's wait at once
    assert out.getvalue() == "" and ticker.line().startswith("train hf:model: 1/4")


def test_a_terminal_gets_the_live_bar_and_no_plain_lines():
    out = io.StringIO()
    progress = bar(Console(file=out, force_terminal=True))
    ticks = Clock(intervals=3)
    ticker = PlainTicker(progress, progress.console, interval_s=0.01, wait=ticks.wait)
    ticker.start()
    ticker.stop()
    assert not ticker.active and ticks.waits == [] and out.getvalue() == ""


def test_clock():
    assert (clock(None), clock(0), clock(61.9), clock(3600 * 2 + 5)) == ("-:--:--", "0:00:00", "0:01:01", "2:00:05")
