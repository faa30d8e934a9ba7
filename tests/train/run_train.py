"""Run or resume a training run in a process of its own, for the crash test:

    python -m tests.train.run_train RUN_DIR CONFIG.json     a new run
    python -m tests.train.run_train RUN_DIR --resume        continue RUN_DIR

With MLEFORGE_TEST_HOLD_AFTER_STEP=k the process stops for good right after step k's
feedback has committed, before its checkpoint is written: the window in which a SIGKILL
leaves the buffer one step ahead of the last checkpoint (the test kills it there).
With MLEFORGE_TEST_TRACE set, each rank appends to RUN_DIR/trace-rank<r>.jsonl, for every step
it generates, the states the feed drew (in group order), the (group, state id) of the rows TRL
gave this rank, and whether this rank's buffer may write (tests/train/test_multiprocess.py).
Prompts are tests/train/engines.short_prompt: the subject here is the resume, not the prompt.
Launched by `accelerate launch` (as `-m tests.train.run_train`), every rank runs it.
"""

from __future__ import annotations

import json
import os
import sys
import time

from mleforge.train import recipe
from mleforge.train.config import TrainConfig
from mleforge.train.grpo import buffer_callback
from tests.train import engines  # registers the test engines

HOLD = "MLEFORGE_TEST_HOLD_AFTER_STEP"
HELD = "held"  # the file that says the process is holding
TRACE = "MLEFORGE_TEST_TRACE"


def trace_feed(run_dir: str) -> None:
    """Record what the feed hands this rank (see the module docstring)."""
    from accelerate import PartialState

    from mleforge.train.grpo import state_feed

    original = state_feed.CurriculumFeed.rows

    def rows(self, step, inputs):
        out = original(self, step, inputs)
        line = {"step": step, "batch": [s.state_id for s in self.batch(step).states],
                "rows": [[r["group"], r["state_id"]] for r in out], "writer": self.buffer.writer}
        rank = PartialState().process_index
        with open(os.path.join(run_dir, f"trace-rank{rank}.jsonl"), "a") as handle:
            handle.write(json.dumps(line) + "\n")
        return out

    state_feed.CurriculumFeed.rows = rows


def main() -> None:
    run_dir, what = sys.argv[1], sys.argv[2]
    if os.environ.get(HOLD):
        step, original = int(os.environ[HOLD]), buffer_callback.FeedbackCallback.feed_back

        def feed_back(self, at, *args, **kwargs):
            out = original(self, at, *args, **kwargs)
            if at == step:
                open(os.path.join(run_dir, HELD), "w").close()
                time.sleep(3600)
            return out

        buffer_callback.FeedbackCallback.feed_back = feed_back
    if os.environ.get(TRACE):
        trace_feed(run_dir)
    if what == "--resume":
        recipe.resume(run_dir, progress=False, renderer=engines.short_prompt)
    else:
        with open(what) as handle:
            recipe.train(TrainConfig.from_dict(json.load(handle)), run_dir, progress=False,
                       renderer=engines.short_prompt)


if __name__ == "__main__":
    main()
