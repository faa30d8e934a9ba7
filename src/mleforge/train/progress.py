"""Progress people watch: a rich bar with the step, an ETA and the figures of the last step.

`RichProgress` is a transformers TrainerCallback built on first use (transformers is an
extra); `set_figures` lets the trainer's own code (the GRPO feedback) show what a step did.
Output goes to the console the caller passes (the CLI's stderr console), stderr by default,
so stdout stays for `--json` and tables; where that is not a terminal, a plain line every few
seconds (mleforge.utils.plain_progress).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from mleforge.utils.plain_progress import PlainTicker


def progress_callback(title: str, *, enabled: bool = True, console: Console | None = None) -> Any:
    """A TrainerCallback that draws a rich progress bar on `console` (nothing when `enabled`
    is False)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from transformers import TrainerCallback

    shown_on = console or Console(stderr=True)

    class RichProgress(TrainerCallback):
        def __init__(self) -> None:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[figures]}"),
                console=shown_on, disable=not enabled,
            )
            self.bar: Any = None
            self.figures = ""
            self.ticker = PlainTicker(self.progress, shown_on)

        def set_figures(self, text: str) -> None:
            self.figures = text
            if self.bar is not None:
                self.progress.update(self.bar, figures=text)

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero and self.bar is None:
                self.progress.start()
                self.bar = self.progress.add_task(title, total=state.max_steps, completed=state.global_step,
                                                  figures=self.figures)
                self.ticker.start()

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.progress.update(self.bar, completed=state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.bar is not None and logs and "loss" in logs and not self.figures:
                self.progress.update(self.bar, figures=f"loss {logs['loss']:.4f}")

        def on_train_end(self, args, state, control, **kwargs):
            self.close()

        def close(self) -> None:
            if self.bar is not None:
                self.ticker.stop()
                self.progress.stop()
                self.bar = None

    return RichProgress()
