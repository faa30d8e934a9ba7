"""A run SIGKILLed during a step and resumed ends exactly like an uninterrupted run of the same
seed: the same buffer rows, the same metrics, the same rollouts, the same weights."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from mleforge.train.config import ModelConfig, TrainConfig  # noqa: E402
from mleforge.train.records import VOLATILE_FIELDS  # noqa: E402
from tests.train.crash import buffer_rows, finish, kill_after_step_one, lines, start  # noqa: E402


def test_a_run_killed_mid_step_and_resumed_equals_the_uninterrupted_run(tiny, titanic, journals, tmp_path):
    from safetensors.torch import load_file

    config = TrainConfig(
        model=ModelConfig(spec=f"hf:{tiny}", gradient_checkpointing=False), tasks="titanic", eval_tasks="",
        steps=3, group_size=2, groups_per_step=2, micro_batch=2, max_new_tokens=8, warm_start="none",
        journals=str(journals), sandbox={"executor": "local"}, generation={"backend": "sampled-test"},
        stepwise={"enabled": False}, lr=5e-3,
        sampler={"kind": "learnability"}, seed=5,
    )
    first, straight, killed = kill_after_step_one(config.to_dict(), tmp_path)
    assert not (killed / "checkpoints" / "checkpoint-2" / "mleforge_checkpoint.json").exists()
    assert (killed / "checkpoints" / "checkpoint-1" / "mleforge_checkpoint.json").exists()
    finish(start(killed, "--resume"), killed)
    finish(first, straight)

    assert buffer_rows(killed) == buffer_rows(straight)
    assert lines(killed / "metrics.jsonl", VOLATILE_FIELDS) == lines(straight / "metrics.jsonl", VOLATILE_FIELDS)
    assert [m["step"] for m in lines(killed / "metrics.jsonl", ())] == [0, 1, 2]
    for step in range(3):
        name = f"rollouts/step-{step}.jsonl"
        assert lines(killed / name, ("cached",)) == lines(straight / name, ("cached",))
    outcomes = {x["outcome"] for s in range(3) for x in lines(straight / f"rollouts/step-{s}.jsonl", ())}
    assert len(outcomes) > 1  # the rollouts really vary (sampled by the model, then executed)
    a, b = (load_file(run / "final" / "adapter_model.safetensors") for run in (killed, straight))
    assert a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)
