"""What `mleforge buffer show` prints: sizes, the top states by LP, growth over steps."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.learnability import potentials
from mleforge.curriculum.records import StateStats
from mleforge.curriculum.schema import SCHEMA_VERSION


def _stats(row: dict[str, Any]) -> StateStats:
    return StateStats(
        state_id=row["state_id"], task_id=row["task_id"], stage=row["stage"], direction=row["direction"],
        is_seed=row["is_seed"], rollouts=row["rollouts"], successes=row["successes"],
        reward_sum=row["reward_sum"], reward_sumsq=row["reward_sumsq"], last_rewards=tuple(row["last_rewards"]),
        best_score=row["best_score"], last_sampled_step=row["last_sampled_step"], added_step=row["added_step"],
    )


def buffer_summary(buffer: StateBuffer, top: int = 10) -> dict[str, Any]:
    """The buffer as of its latest write: live states by task and stage, the `top`
    states by LP (with every LP term and their statistics), and one row per sealed step."""
    rows = buffer.rows()
    stats = [_stats(r) for r in rows]
    refs = buffer.tasks()
    counts = buffer.counts()
    sizes: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: {"states": 0, "seeds": 0, "rollouts": 0})
    for s in stats:
        entry = sizes[(s.task_id, s.stage)]
        entry["states"] += 1
        entry["seeds"] += int(s.is_seed)
        entry["rollouts"] += s.rollouts
    ranked = []
    # N is every rollout counted, evicted states' included, as the sampler's snapshots count it.
    for row, s, potential in zip(rows, stats, potentials(stats, counts["rollouts"], refs, buffer.learnability)):
        ranked.append({
            "state_id": s.state_id, "task_id": s.task_id, "stage": s.stage, "is_seed": s.is_seed,
            **potential.to_dict(),
            "rollouts": s.rollouts, "successes": s.successes, "mean_reward": s.mean_reward,
            "best_score": s.best_score, "last_rewards": list(s.last_rewards),
            "last_sampled_step": s.last_sampled_step, "added_step": s.added_step,
            "parent_state_id": row["parent_state_id"], "policy_step": row["policy_step"],
        })
    ranked.sort(key=lambda r: (-r["LP"], r["state_id"]))
    return {
        "path": str(buffer.path),
        "schema_version": SCHEMA_VERSION,
        "sealed_step": buffer.sealed_step,
        **counts,
        "learnability": buffer.learnability.to_dict(),
        "by_task_stage": [
            {"task_id": task, "stage": stage, **entry} for (task, stage), entry in sorted(sizes.items())
        ],
        "top": ranked[:top],
        "growth": buffer.growth(),
    }
