"""Exporting the buffer's live states: JSON lines, or parquet for verl.

One row per state. There is no `prompt` column: the trainer renders it from
`state` with the task at hand (mleforge.agent.prompts.render_prompt) and the
template of its tokenizer. `extra_info` holds the state id: verl's RLHFDataset
keeps each row's `extra_info` and passes it to the reward function
(`compute_score(data_source, solution_str, ground_truth, extra_info)`), which
is how a rollout finds its way back to the buffer state it came from.
`data_source` is "mleforge" so verl's reward dispatch can route to ours.

In JSON lines `state` is the State object (`State.to_dict()`); in parquet it is
that object as a JSON string, because a journal's nesting varies by state and
parquet needs one schema.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.errors import CurriculumError
from mleforge.errors import MissingExtra

FORMATS = ("jsonl", "parquet")
DATA_SOURCE = "mleforge"


def export_rows(buffer: StateBuffer) -> list[dict[str, Any]]:
    """The export's rows, sorted by state_id, with `state` as an object."""
    out = []
    for row in buffer.rows(with_state=True):
        n = row["rollouts"]
        out.append({
            "state_id": row["state_id"],
            "task_id": row["task_id"],
            "stage": row["stage"],
            "data_source": DATA_SOURCE,
            "is_seed": row["is_seed"],
            "state": row["state"],
            "extra_info": {"state_id": row["state_id"], "task_id": row["task_id"], "stage": row["stage"]},
            "priority": row["priority"],
            "rollouts": n,
            "successes": row["successes"],
            "mean_reward": row["reward_sum"] / n if n else None,
            "best_score": row["best_score"],
            "last_rewards": row["last_rewards"],
            "parent_state_id": row["parent_state_id"],
            "rollout_id": row["rollout_id"],
            "policy_step": row["policy_step"],
            "added_step": row["added_step"],
            "created_at": row["created_at"],
        })
    return out


def _parquet_table(rows: list[dict[str, Any]]):
    try:
        import pyarrow as pa
    except ImportError:
        raise MissingExtra("pyarrow", "verl", "parquet export") from None
    schema = pa.schema([
        ("state_id", pa.string()), ("task_id", pa.string()), ("stage", pa.string()),
        ("data_source", pa.string()), ("is_seed", pa.bool_()), ("state", pa.string()),
        ("extra_info", pa.struct([("state_id", pa.string()), ("task_id", pa.string()), ("stage", pa.string())])),
        ("priority", pa.float64()), ("rollouts", pa.int64()), ("successes", pa.int64()),
        ("mean_reward", pa.float64()), ("best_score", pa.float64()), ("last_rewards", pa.list_(pa.float64())),
        ("parent_state_id", pa.string()), ("rollout_id", pa.string()), ("policy_step", pa.int64()),
        ("added_step", pa.int64()), ("created_at", pa.float64()),
    ])
    flat = [{**r, "state": json.dumps(r["state"], ensure_ascii=False)} for r in rows]
    return pa.Table.from_pylist(flat, schema=schema)


def export_buffer(buffer: StateBuffer, out: str | Path, fmt: str) -> int:
    """Write the live states to `out` as `fmt` (jsonl or parquet), atomically; the row count."""
    if fmt not in FORMATS:
        raise CurriculumError(f"export format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    out = Path(out)
    rows = export_rows(buffer)
    table = _parquet_table(rows) if fmt == "parquet" else None  # fail on a missing extra before writing
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if table is not None:
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; an export is a shareable result
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(rows)
