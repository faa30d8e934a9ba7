"""Expert journals, the buffer's seeds: read from a folder of runs, or made by the template expert.

ML-Agent's step-wise RL samples states from the expert's state distribution: every state
along an expert trajectory (mleforge.curriculum.seeds.journal_states). `load_journals`
reads them from a folder of runs (`mleforge collect`, `mleforge run`, `mleforge eval`: any
folder with journal.json files); `expert_journals` makes them with the offline template
expert, one episode per task, in `<run>/expert/<task>/` (resumable: a run interrupted
there continues its episodes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mleforge.agent.journal import Journal
from mleforge.errors import ConfigError
from mleforge.runs import EXPERT_DIR

if TYPE_CHECKING:
    from mleforge.sandbox import Executor
    from mleforge.tasks.registry import TaskRegistry
    from mleforge.tasks.task import Task

JOURNAL_FILE = "journal.json"


def load_journals(folder: str | Path, task_ids: Sequence[str] | None = None) -> list[Journal]:
    """Every journal under `folder` (a collect folder, its journals/, or any tree of
    EpisodeRunner folders), in path order. With `task_ids`, only the journals of those
    tasks, and at least one (a folder of other tasks' journals is refused)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigError(f"no journals folder at {root}; give what `mleforge collect` wrote")
    journals = [Journal.load(p) for p in sorted(root.rglob(JOURNAL_FILE))]
    if task_ids is None:
        return journals
    wanted = set(task_ids)
    kept = [j for j in journals if j.task_id in wanted]
    if not kept:
        found = sorted({j.task_id for j in journals})
        raise ConfigError(f"--journals {folder}: no journal of the training tasks ({', '.join(sorted(wanted))}); "
                          f"it holds {', '.join(found)}")
    return kept


def expert_journals(tasks: Sequence[Task], run_dir: str | Path, *, steps: int, seed: int, executor: Executor,
                    registry: TaskRegistry, on_step: Callable[..., Any] | None = None) -> list[Journal]:
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
