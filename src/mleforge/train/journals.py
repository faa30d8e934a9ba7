"""Expert journals, the buffer's seeds: from collected runs, or made by the template expert.

ML-Agent's step-wise RL samples states from the expert's state distribution: every state
along an expert trajectory (mleforge.curriculum.seeds.journal_states). `load_journals`
reads them from a folder of runs (`mleforge collect`, `mleforge run`, `mleforge eval`: any
folder with journal.json files); `expert_journals` makes them with the offline template
expert, one episode per task, in `<run>/expert/<task>/` (resumable: a run interrupted
there continues its episodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mleforge.agent.journal import Journal
from mleforge.train.errors import TrainError

JOURNAL_FILE = "journal.json"
EXPERT_DIR = "expert"


def journal_files(folder: str | Path) -> list[Path]:
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise TrainError(f"--journals {folder}: not a folder; give a folder of collected runs (mleforge collect)")
    files = sorted(folder.rglob(JOURNAL_FILE))
    if not files:
        raise TrainError(f"--journals {folder}: no {JOURNAL_FILE} under it; run `mleforge collect` first, "
                         "or leave --journals out to let the template expert make them")
    return files


def load_journals(folder: str | Path, task_ids: Sequence[str]) -> list[Journal]:
    """The journals under `folder` of the tasks `task_ids` (others are left out), in path order."""
    wanted = set(task_ids)
    journals = [Journal.load(path) for path in journal_files(folder)]
    kept = [j for j in journals if j.task_id in wanted]
    if not kept:
        found = sorted({j.task_id for j in journals})
        raise TrainError(f"--journals {folder}: no journal of the training tasks ({', '.join(sorted(wanted))}); "
                         f"it holds {', '.join(found)}")
    return kept


def expert_journals(tasks: Sequence[Any], run_dir: str | Path, *, steps: int, seed: int, executor: Any,
                    registry: Any, on_step: Any = None) -> list[Journal]:
    """One template-expert episode of `steps` steps per task (seeded), saved under
    `<run_dir>/expert/<task>/`; finished episodes are read back, not redone."""
    from mleforge.agent.runner import EpisodeConfig, EpisodeRunner
    from mleforge.policies import make_policy

    policy = make_policy("template", registry=registry)
    journals = []
    for i, task in enumerate(tasks):
        config = EpisodeConfig(steps=steps, seed=seed + i)
        folder = Path(run_dir) / EXPERT_DIR / task.id
        runner = EpisodeRunner(task, policy, executor, config, folder, policy_name="template", on_step=on_step)
        runner.run()
        journals.append(Journal.load(folder / JOURNAL_FILE))
    return journals
