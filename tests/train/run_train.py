"""Run or resume a training run in a process of its own, for the crash test:

    python -m tests.train.run_train RUN_DIR CONFIG.json     a new run
    python -m tests.train.run_train RUN_DIR --resume        continue RUN_DIR

With MLEFORGE_TEST_HOLD_AFTER_STEP=k the process stops for good right after step k's
feedback has committed, before its checkpoint is written: the window in which a SIGKILL
leaves the buffer one step ahead of the last checkpoint (the test kills it there).
Prompts are tests/train/engines.short_prompt: the subject here is the resume, not the prompt.
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
    if what == "--resume":
        recipe.resume(run_dir, progress=False, renderer=engines.short_prompt)
    else:
        with open(what) as handle:
            recipe.train(TrainConfig.from_dict(json.load(handle)), run_dir, progress=False,
                       renderer=engines.short_prompt)


if __name__ == "__main__":
    main()
