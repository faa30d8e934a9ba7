"""The contamination guard: warn when a policy is evaluated on tasks it was trained on.

Convention. Every mleforge run folder records what it ran in `run.json`:

    {"kind": "eval" | "train" | "sft" | ..., "tasks": ["titanic", "mlebench:spaceship-titanic", ...]}

A checkpoint names the run that trained it with `mleforge_run.json` inside the checkpoint
folder (same schema), or simply lives in (or directly under) a run folder that has a
`run.json`. For `hf:<folder>` the guard looks, in order, at

    <folder>/mleforge_run.json, <folder>/run.json, <folder>/../run.json

and uses every record found whose kind is not "eval" (an evaluation trains nothing).
Other records can be named explicitly (`EvalConfig.train_runs`, `mleforge eval
--trained-on`): a run folder (its run.json) or a record file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.errors import ConfigError
from mleforge.runs import CHECKPOINT_RECORD, RUN_RECORD


@dataclass(frozen=True)
class TrainingRecord:
    path: str
    kind: str
    tasks: tuple[str, ...]


@dataclass(frozen=True)
class Contamination:
    records: tuple[TrainingRecord, ...]  # the training records that were checked
    overlap: tuple[str, ...]  # evaluated tasks that some training run used, in evaluation order

    @property
    def warning(self) -> str | None:
        if not self.overlap:
            return None
        sources = ", ".join(r.path for r in self.records if set(r.tasks) & set(self.overlap))
        return (f"CONTAMINATION: the policy was trained on {len(self.overlap)} of the evaluated tasks "
                f"({', '.join(self.overlap)}; training records: {sources}); scores on them do not "
                "measure generalization")

    def to_dict(self) -> dict[str, Any]:
        return {"checked": [{"path": r.path, "kind": r.kind, "tasks": list(r.tasks)} for r in self.records],
                "overlap": list(self.overlap), "warning": self.warning}


def read_record(path: str | Path) -> TrainingRecord:
    """A run record: a run folder (its run.json) or the JSON file itself."""
    path = Path(path)
    if path.is_dir():
        path = path / RUN_RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the run record {path}: {exc}") from None
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise ConfigError(f"{path}: a run record needs `tasks`, a list of task ids "
                          '(as in {"kind": "train", "tasks": ["titanic"]})')
    return TrainingRecord(str(path), str(data.get("kind", "train")), tuple(tasks))


def checkpoint_records(policy: str) -> list[TrainingRecord]:
    """The training records next to an `hf:<folder>` checkpoint (see the module doc)."""
    prefix, _, name = policy.partition(":")
    folder = Path(name).expanduser()
    if prefix != "hf" or not folder.is_dir():
        return []
    candidates = (folder / CHECKPOINT_RECORD, folder / RUN_RECORD, folder.resolve().parent / RUN_RECORD)
    records = [read_record(p) for p in dict.fromkeys(candidates) if p.is_file()]
    return [r for r in records if r.kind != "eval"]


def check_contamination(policy: str, tasks: Sequence[str], explicit: Iterable[str | Path] = ()) -> Contamination:
    """Which of `tasks` the policy's training runs used: those found next to its checkpoint
    and those named in `explicit`."""
    records = checkpoint_records(policy) + [read_record(p) for p in explicit]
    trained = {t for r in records for t in r.tasks}
    return Contamination(tuple(records), tuple(t for t in tasks if t in trained))
