"""The contamination guard on hand-made training records."""

from __future__ import annotations

import json

import pytest

from mleforge.errors import ConfigError
from mleforge.eval.contamination import check_contamination


def _record(path, tasks, kind="train"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"kind": kind, "tasks": tasks}))
    return path


def test_record_inside_the_checkpoint(tmp_path):
    ckpt = tmp_path / "train" / "checkpoint-400"
    _record(ckpt / "mleforge_run.json", ["titanic", "penguins", "digits"])
    got = check_contamination(f"hf:{ckpt}", ["penguins", "wine", "titanic"])
    assert got.overlap == ("penguins", "titanic")  # in evaluation order
    assert "CONTAMINATION" in got.warning and "penguins, titanic" in got.warning
    assert str(ckpt / "mleforge_run.json") in got.warning
    assert got.to_dict()["checked"][0]["tasks"] == ["titanic", "penguins", "digits"]


def test_record_of_the_run_folder_above_the_checkpoint(tmp_path):
    _record(tmp_path / "train" / "run.json", ["mlebench:spaceship-titanic"], kind="grpo")
    ckpt = tmp_path / "train" / "checkpoint-10"
    ckpt.mkdir()
    got = check_contamination(f"hf:{ckpt}", ["mlebench:spaceship-titanic", "titanic"])
    assert got.overlap == ("mlebench:spaceship-titanic",)


def test_no_overlap_no_warning_and_eval_records_ignored(tmp_path):
    ckpt = tmp_path / "eval-dir" / "model"
    _record(tmp_path / "eval-dir" / "run.json", ["titanic"], kind="eval")  # an evaluation trains nothing
    ckpt.mkdir()
    got = check_contamination(f"hf:{ckpt}", ["titanic"])
    assert got.overlap == () and got.warning is None and got.records == ()
    # Policies that are not local checkpoints have nothing next to them to check.
    assert check_contamination("template", ["titanic"]).records == ()
    assert check_contamination("bundled:smollm2-135m", ["titanic"]).records == ()


def test_explicit_training_runs(tmp_path):
    _record(tmp_path / "sft" / "run.json", ["house-prices"], kind="sft")
    got = check_contamination("openai:my-finetune", ["house-prices", "titanic"], [tmp_path / "sft"])
    assert got.overlap == ("house-prices",)
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "train"}))
    with pytest.raises(ConfigError, match="needs `tasks`"):
        check_contamination("template", ["titanic"], [tmp_path / "bad.json"])
    with pytest.raises(ConfigError, match="cannot read"):
        check_contamination("template", ["titanic"], [tmp_path / "nowhere"])
