"""`mleforge sft` on a tiny random model: the loss on the samples falls, and the result loads."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from mleforge.errors import ConfigError  # noqa: E402
from mleforge.eval.contamination import check_contamination, read_record  # noqa: E402
from mleforge.eval.report import write_report  # noqa: E402
from mleforge.policies import SamplingConfig, make_policy  # noqa: E402
from mleforge.train.config import ModelConfig, SFTRunConfig  # noqa: E402
from mleforge.train.errors import TrainError  # noqa: E402
from mleforge.train.samples import read_samples  # noqa: E402
from mleforge.train.sft import run_sft  # noqa: E402
from tests.train.tiny import sample, tiny_model  # noqa: E402

ANSWER = "Plan: copy the sample.\n```python\nimport pandas as pd\nprint('the model trains on the data')\n```"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_lora_sft_lowers_the_completion_loss_and_writes_a_loadable_checkpoint(tiny, tmp_path):
    rows = [sample("titanic", "draft", "def add(a, b):", ANSWER), sample("penguins", "improve", "import numpy", ANSWER)]
    samples = write(tmp_path / "samples.jsonl", rows * 4)
    config = SFTRunConfig(samples=str(samples), out=str(tmp_path / "run"), model=ModelConfig(spec=f"hf:{tiny}"),
                          sft={"max_steps": 25, "lr": 2e-2, "batch_size": 4, "grad_accum": 1, "save_steps": 10},
                          seed=1)
    result = run_sft(config, progress=False)
    assert result.samples == 8 and result.dropped_long == 0 and result.steps == 25
    # LoRA cannot sharpen the tiny model's logits much (its norms and head stay frozen), but
    # the loss on the samples themselves goes down (measured: 5.77 -> 5.56)
    assert result.loss_after < 0.98 * result.loss_before
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, 26))
    record = read_record(tmp_path / "run")
    assert record.kind == "sft" and record.tasks == ("titanic", "penguins")
    model_dir = tmp_path / "run" / "model"
    assert (model_dir / "adapter_config.json").is_file() and (model_dir / "mleforge_model.json").is_file()
    assert check_contamination(f"hf:{model_dir}", ["titanic", "diabetes"]).overlap == ("titanic",)
    # the same command again: the run is done, nothing is redone
    assert run_sft(config, progress=False) == result
    written = write_report([tmp_path / "run"], tmp_path / "report")
    md = Path(written.markdown).read_text()
    assert "## Supervised fine-tuning" in md and "sft_loss.png" in md
    with pytest.raises(TrainError, match="holds another SFT run"):
        run_sft(SFTRunConfig(**{**config.__dict__, "sft": dataclasses.replace(config.sft, lr=1e-3)}), progress=False)


def test_full_sft_learns_the_answer_and_hf_loads_it(tiny, tmp_path):
    rows = [sample("titanic", "draft", "def add(a, b):", ANSWER)]
    samples = write(tmp_path / "samples.jsonl", rows * 4)
    config = SFTRunConfig(samples=str(samples), out=str(tmp_path / "run"),
                          model=ModelConfig(spec=f"hf:{tiny}", full=True),
                          sft={"max_steps": 80, "lr": 1e-2, "batch_size": 4, "grad_accum": 1}, seed=1)
    result = run_sft(config, progress=False)
    assert result.loss_after < 0.5 * result.loss_before
    model_dir = tmp_path / "run" / "model"
    assert (model_dir / "config.json").is_file() and not (model_dir / "adapter_config.json").exists()
    policy = make_policy(f"hf:{model_dir}", num_threads=1)
    text = policy.generate([rows[0]["prompt"]], sampling=SamplingConfig(temperature=0, max_new_tokens=6))[0][0].text
    assert text and ANSWER.startswith(text)


def test_bad_samples_are_refused_with_file_and_line(tmp_path):
    good = sample("titanic", "draft", "q", "a")
    path = write(tmp_path / "s.jsonl", [good, {**good, "completion": [{"role": "user", "content": "x"}]}])
    with pytest.raises(ConfigError, match=r"s.jsonl:2: completion\[0\]"):
        read_samples(path)
    write(path, [{**good, "stage": "plan"}])
    with pytest.raises(ConfigError, match="s.jsonl:1: stage must be one of draft, debug, improve"):
        read_samples(path)
    with pytest.raises(ConfigError, match="no samples at"):
        read_samples(tmp_path / "missing.jsonl")


def test_the_loss_is_measured_on_a_seeded_subset_of_loss_samples():
    from mleforge.train.sft import loss_subset

    rows = [f"s{i}" for i in range(10)]
    picked = loss_subset(rows, 4, seed=3)
    assert len(picked) == 4 and len(set(picked)) == 4 and set(picked) <= set(rows)
    assert loss_subset(rows, 4, seed=3) == picked  # the same seed, the same subset
    assert loss_subset(rows, 10, seed=3) == rows and loss_subset(rows, 32, seed=0) == rows
    with pytest.raises(ConfigError, match="sft.loss_samples"):
        SFTRunConfig(samples="s.jsonl", out="run", sft={"loss_samples": 0})


def test_a_run_written_before_a_setting_existed_resumes_when_it_has_the_default(tmp_path):
    import yaml

    from mleforge.train.sft import _check_same_run

    config = SFTRunConfig(samples="s.jsonl", out=str(tmp_path))
    old = config.to_dict()
    del old["sft"]["loss_samples"]  # a config.yaml from before loss_samples: it read as the default, 32
    del old["model"]["lora_layers"]  # and from before model.lora_layers: every layer
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    _check_same_run(tmp_path, config)
    with pytest.raises(TrainError, match=r"different sft\.loss_samples"):
        _check_same_run(tmp_path, SFTRunConfig(samples="s.jsonl", out=str(tmp_path), sft={"loss_samples": 8}))
    with pytest.raises(TrainError, match=r"different model"):
        _check_same_run(tmp_path, SFTRunConfig(samples="s.jsonl", out=str(tmp_path),
                                               model=ModelConfig(lora_layers=12)))


def test_the_warm_start_of_a_multi_process_launch_runs_sft_outside_the_launch(tiny, tmp_path, monkeypatch):
    """The main process of `accelerate launch --num_processes N` makes --sft auto's warm start in a
    process of its own: one that inherited the rank's launch variables would wait for peers forever
    (the timeout below turns that into a failure)."""
    import functools
    import subprocess

    from mleforge.train import warm_start
    from mleforge.train.sft import finished_sft

    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "x"}.items():
        monkeypatch.setenv(name, value)
    assert warm_start.solo_environment({"RANK": "1", "TORCHELASTIC_RUN_ID": "x", "PATH": "/bin"}) == {"PATH": "/bin"}
    monkeypatch.setattr(subprocess, "run", functools.partial(subprocess.run, timeout=300))
    samples = write(tmp_path / "samples.jsonl", [sample("titanic", "debug", "def add(a, b):", ANSWER)] * 2)
    config = SFTRunConfig(samples=str(samples), out=str(tmp_path / "run" / "sft"), model=ModelConfig(spec=f"hf:{tiny}"),
                          sft={"max_steps": 2, "batch_size": 2, "grad_accum": 1, "save_steps": 10, "loss_samples": 1},
                          seed=1)
    result = warm_start.run_sft_apart(config)
    assert result == finished_sft(tmp_path / "run" / "sft") and result.steps == 2 and result.samples == 2
    assert (Path(result.model_dir) / "adapter_config.json").is_file()
    broken = SFTRunConfig(**{**config.__dict__, "samples": str(tmp_path / "none.jsonl"), "out": str(tmp_path / "b")})
    with pytest.raises(TrainError, match="exit code 2"):
        warm_start.run_sft_apart(broken)
