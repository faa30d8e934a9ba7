"""The evaluation's progress: seeds counted as seeds, plain lines where output is no terminal."""

from __future__ import annotations

import io

from rich.console import Console

from mleforge.eval.progress import RichGridProgress
from mleforge.eval.records import RunFailure
from tests.waiting import wait_for

GRID = [("penguins", 0), ("penguins", 1), ("penguins", 2), ("titanic", 0), ("titanic", 1), ("titanic", 2)]


def _row(progress: RichGridProgress, task_id: str):
    return progress.progress.tasks[progress._rows[task_id]]


def test_task_bars_count_seeds_and_a_log_gets_a_line_every_interval():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with RichGridProgress(console=console, title="template", plain_interval_s=0.05) as progress:
        progress.start(GRID, finished=[("titanic", 0)], steps=4)
        assert (_row(progress, "penguins").total, _row(progress, "titanic").completed) == (3, 1)
        progress.step("penguins", 0, None)
        progress.step("penguins", 0, None)
        assert _row(progress, "penguins").completed == 0.5  # half of one seed
        assert progress.status_line().startswith("template: 1/6 runs finished, ")
        assert progress.status_line().endswith("s; running: penguins seed 0 step 2/4")
        assert wait_for(lambda: "running: penguins seed 0 step 2/4" in out.getvalue())
        progress.done("penguins", 0, object())  # stopped after 2 of 4 steps: the seed is still whole
        progress.done("penguins", 1, RunFailure("penguins", 1, "ValueError: boom"))
        assert _row(progress, "penguins").completed == 2
        assert "(seeds, 1 failed)" in _row(progress, "penguins").description
        assert progress.progress.tasks[progress._grid].completed == 3
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("template: 3/6 runs finished (1 failed), ") and "running" not in last


def test_a_terminal_gets_no_plain_lines():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with RichGridProgress(console=console, plain_interval_s=0.01) as progress:
        progress.start(GRID, finished=[], steps=2)
        assert not progress.plain and progress._ticker is None
