"""States as verl's dataset rows, and the buffer exported as verl's parquet.

verl's RLHFDataset reads these columns (verl/utils/dataset/rl_dataset.py, 0.9.1):

    data_source   "mleforge": the reward function refuses rows of any other source
    prompt        the chat messages (`data.prompt_key`), rendered here as `mleforge train`
                  renders them (the run's PromptConfig); verl applies the chat template
    ability       "mle"
    reward_model  {"ground_truth": the state id, "style": "execution"}: verl's reward managers
                  read `reward_model.ground_truth`; ours is no answer (the private answers
                  never leave the grader), only the id the reward checks its state against
    extra_info    {"state_id", "task_id", "stage", "state" (the State as JSON), "index", "run"
                  (the run directory)}: verl passes it to `compute_score`, which rebuilds the
                  state from it (a reward worker on any node needs no access to the buffer)
                  and loads the run's tasks and settings from the directory. With the curriculum
                  (mleforge.train.verl.dataset) it also names the buffer's owner (`owner`),
                  which the reward reports each rollout to.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mleforge.agent.state import State
from mleforge.errors import MissingExtra
from mleforge.train.errors import TrainError
from mleforge.train.verl.run import VerlRun

DATA_SOURCE = "mleforge"
ABILITY = "mle"
STYLE = "execution"


def verl_row(run: VerlRun, state: State, index: int, owner: str | None = None) -> dict[str, Any]:
    """One state as the row verl's dataset yields (before verl adds its own fields)."""
    extra: dict[str, Any] = {
        "state_id": state.state_id, "task_id": state.task_id, "stage": state.stage,
        "state": json.dumps(state.to_dict(), ensure_ascii=False), "index": index, "run": str(run.folder),
    }
    if owner is not None:
        extra["owner"] = owner
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in run.render(state)],
        "ability": ABILITY,
        "reward_model": {"ground_truth": state.state_id, "style": STYLE},
        "extra_info": extra,
    }


def state_of(extra_info: Any, ground_truth: Any) -> State:
    """The State a row carries, checked against its id (a row edited by hand, or built by
    something else, is refused with the reason)."""
    if not isinstance(extra_info, dict) or not isinstance(extra_info.get("state"), str):
        raise TrainError("this row's extra_info carries no mleforge state; build the dataset with "
                         "`mleforge buffer export --format verl` or mleforge.train.verl.dataset.CurriculumDataset")
    state = State.from_dict(json.loads(extra_info["state"]))
    if state.state_id != extra_info.get("state_id") or state.state_id != ground_truth:
        raise TrainError(f"the row's state hashes to {state.state_id}, but its extra_info says "
                         f"{extra_info.get('state_id')!r} and its ground_truth {ground_truth!r}; rows must not be edited")
    return state


def _table(rows: list[dict[str, Any]]):
    try:
        import pyarrow as pa
    except ImportError:
        raise MissingExtra("pyarrow", "verl", "verl's parquet export") from None
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([
        ("data_source", pa.string()), ("prompt", pa.list_(message)), ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("state_id", pa.string()), ("task_id", pa.string()), ("stage", pa.string()),
                                  ("state", pa.string()), ("index", pa.int64()), ("run", pa.string())])),
    ])
    return pa.Table.from_pylist(rows, schema=schema)


def export_verl(buffer_dir: str | Path, out: str | Path, run: VerlRun | None = None) -> int:
    """Write the buffer's live states (sorted by id) to `out` as verl's parquet, atomically;
    the row count. `run` gives the tasks and prompt settings (default: the directory's own)."""
    from mleforge.curriculum.buffer import StateBuffer

    run = run or VerlRun.load(buffer_dir)
    with StateBuffer(buffer_dir, create=False) as buffer:
        ids = [r["state_id"] for r in buffer.rows()]
        states = buffer.get_states(ids)
    table = _table([verl_row(run, s, i) for i, s in enumerate(states)])
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        import pyarrow.parquet as pq

        pq.write_table(table, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return table.num_rows
