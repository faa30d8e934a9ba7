"""An evaluation that runs beside other work: the step-wise evaluation before training, in its
own thread while the expert's collection runs in the caller's.

The two use a CPU differently: decoding at batch 1 waits on memory, and the collection's
scripts run one or two threads with passive waits, so side by side they take less than one
after the other (measure it with the main job, `mleforge train` on the cpu preset: its run.json
records `wall_s`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console

from mleforge.sandbox.stoppable import ExecutorStopped, StoppableExecutor

if TYPE_CHECKING:
    from mleforge.sandbox import Executor

# evaluate(executor, progress): the evaluation itself, on the executor it is given
Evaluate = Callable[["Executor", bool], dict[str, Any]]


class BeforeEvaluation:
    """The step-wise evaluation before training, run in its own thread when `background`, else
    at once in the foreground; `wait()` returns its result.

    The background evaluation shows no bar (one live display at a time: the collection's); it
    says on `console` when it starts, what it found, and at once if it fails. Its generation
    is seeded and sees the same states, so its result is the one it would give alone unless
    one of its runs hits the time limit because of the load beside it.
    `stop()` is for a caller that fails first: the evaluation's runs are cancelled and refused
    from then on (StoppableExecutor), so the executor can close; a generation still going ends
    on its own in the thread (a daemon: it does not hold the process), and writes nothing.
    `subject` names what is evaluated on what, for those lines ("<spec> on <tasks>")."""

    def __init__(self, evaluate: Evaluate, executor: Executor, *, background: bool, progress: bool, subject: str,
                 console: Console | None = None):
        self._progress = progress
        self._console = console or Console(stderr=True)
        self._result: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._executor: StoppableExecutor | None = None
        if not background:
            self._result = evaluate(executor, progress)
            return
        if progress:
            self._console.print(f"step-wise evaluation (before) of {subject}: running alongside the expert's "
                                "collection", highlight=False)
        self._executor = StoppableExecutor(executor)
        args = (evaluate, self._executor)
        self._thread = threading.Thread(target=self._main, args=args, name="mleforge-before-eval", daemon=True)
        self._thread.start()

    def _main(self, evaluate: Evaluate, executor: Executor) -> None:
        try:
            self._result = evaluate(executor, False)
        except BaseException as exc:  # re-raised in the caller's thread by wait()
            self._error = exc
            if self._progress and not isinstance(exc, ExecutorStopped):
                self._console.print(f"step-wise evaluation (before) failed: {exc}; the run stops when the "
                                    "collection ends", highlight=False)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> dict[str, Any]:
        if self._thread is not None:
            if self._progress and self._thread.is_alive():
                with self._console.status("waiting for the step-wise evaluation (before)"):
                    self._thread.join()
            else:
                self._thread.join()
            if self._error is not None:
                raise self._error
            if self._progress:
                self._say()
            self._thread = None
        assert self._result is not None
        return self._result

    def stop(self, timeout: float = 60.0) -> None:
        """Before the executor closes under a failing caller: no run of the evaluation is left
        going (a run takes a moment to end once cancelled)."""
        if self._executor is not None and self.running:
            self._executor.stop(timeout)

    def _say(self) -> None:
        result = self._result or {}
        metrics, timing = result.get("metrics") or {}, result.get("timing") or {}
        if not result.get("available") or not metrics:
            return
        rate = lambda key: f"{100 * metrics[key]['mean']:.1f}%"  # noqa: E731
        self._console.print(
            f"step-wise evaluation (before): {result.get('n_states')} states, format errors "
            f"{rate('format_error_rate')}, valid {rate('valid_rate')}, mean reward "
            f"{metrics['mean_reward']['mean']:.3f} (generation {timing.get('gen_s', 0):.0f} s)", highlight=False)
