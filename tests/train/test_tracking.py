"""--report-to: a real 2-step GRPO run and a real SFT run on a tiny model with TensorBoard,
whose event files are read back and hold mleforge's own figures beside TRL's."""

from __future__ import annotations

import importlib.util
import json

import pytest

pytest.importorskip("trl")

from mleforge import config as tree  # noqa: E402
from mleforge.errors import ConfigError, MissingExtra  # noqa: E402
from mleforge.train.config import ModelConfig, SFTRunConfig, TrainConfig  # noqa: E402
from mleforge.train.recipe import train  # noqa: E402
from mleforge.train.sft import run_sft  # noqa: E402
from mleforge.train.tracking import TENSORBOARD_DIR, require_tracker, scalars  # noqa: E402
from tests.train import engines  # noqa: E402, F401  (registers the test engines)
from tests.train.test_grpo import REWARDS  # noqa: E402
from tests.train.tiny import sample  # noqa: E402

ANSWER = "Plan: copy the sample.\n```python\nimport pandas as pd\nprint('ok')\n```"


def events(folder):
    """{tag: [(step, value), ...]} of every scalar in the TensorBoard event files under `folder`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(folder.rglob("events.out.tfevents.*"))
    assert files, f"no event file under {folder}"
    out: dict[str, list] = {}
    for path in files:
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in accumulator.Scalars(tag))
    return out


def test_a_two_step_run_writes_mleforges_step_figures_to_tensorboard(tiny, titanic, journals, tmp_path, registry):
    pytest.importorskip("tensorboard")
    config = TrainConfig(
        model=ModelConfig(spec=f"hf:{tiny}"), tasks="titanic", eval_tasks="", steps=2, group_size=4,
        micro_batch=4, max_new_tokens=16, warm_start="none", journals=str(journals),
        sandbox={"executor": "local"}, generation={"backend": "scripted-test"}, stepwise={"enabled": False},
        reward=REWARDS, report_to="tensorboard", seed=3,
    )
    run = tmp_path / "run"
    assert train(config, run, registry=registry, progress=False).steps == 2
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    scalars_by_tag = events(run / TENSORBOARD_DIR)
    # each metrics.jsonl line is in TensorBoard at its trainer step (0-based step k: global step k + 1)
    for name in ("reward_mean", "reward_std", "reward_base_mean", "valid_rate", "format_error_rate",
                 "exec_error_rate", "frac_zero_std_groups", "buffer_size", "states_added", "gen_s", "exec_s",
                 "update_s", "tokens"):
        logged = scalars_by_tag[f"train/mleforge/{name}"]
        assert [step for step, _ in logged] == [1, 2], name
        assert [value for _, value in logged] == pytest.approx([x[name] for x in lines], rel=1e-6), name
    # and says what the rollouts did: the share of each step's 4 rollouts of each outcome
    rollouts = [[json.loads(x) for x in (run / "rollouts" / f"step-{k}.jsonl").read_text().splitlines()]
                for k in (0, 1)]
    for outcome, name in (("valid", "valid_rate"), ("format_error", "format_error_rate")):
        assert [v for _, v in scalars_by_tag[f"train/mleforge/{name}"]] == [
            sum(r["outcome"] == outcome for r in step) / 4 for step in rollouts]
    # TRL's own figures are there too, on the same step axis
    assert scalars_by_tag["train/reward"] and {step for step, _ in scalars_by_tag["train/reward"]} <= {1, 2}
    assert "train/mleforge/step" not in scalars_by_tag


def test_sft_writes_its_loss_to_tensorboard(tiny, tmp_path):
    pytest.importorskip("tensorboard")
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(sample("titanic", "draft", "def add(a, b):", ANSWER)) + "\n"
                               for _ in range(4)))
    config = SFTRunConfig(samples=str(samples), out=str(tmp_path / "run"), model=ModelConfig(spec=f"hf:{tiny}"),
                          sft={"max_steps": 2, "batch_size": 2, "grad_accum": 1, "loss_samples": 1},
                          report_to="tensorboard")
    assert run_sft(config, progress=False).steps == 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = events(tmp_path / "run" / TENSORBOARD_DIR)["train/loss"]
    assert [step for step, _ in logged] == [1, 2]
    assert [value for _, value in logged] == pytest.approx([x["loss"] for x in lines], rel=1e-6)


def test_the_tracker_is_a_flag_and_a_choice():
    import argparse

    parser = argparse.ArgumentParser()
    tree.add_arguments(parser, TrainConfig)
    assert tree.given(parser.parse_args(["--report-to", "tensorboard"])) == {"report_to": "tensorboard"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--report-to", "mlflow"])
    with pytest.raises(ConfigError, match="report_to: got 'mlflow'; expected one of none, tensorboard, wandb"):
        SFTRunConfig(samples="s.jsonl", out="run", report_to="mlflow")
    assert TrainConfig().report_to == "none"


@pytest.mark.parametrize("tracker", ["wandb", "trackio"])
def test_a_tracker_not_installed_is_refused_before_the_model_loads(tracker, tiny, tmp_path, registry):
    if importlib.util.find_spec(tracker) is not None:
        pytest.skip(f"{tracker} is installed here")
    with pytest.raises(MissingExtra, match=rf"--report-to {tracker} needs the `{tracker}` package.*"
                                           rf"pip install 'mleforge\[{tracker}\]'"):
        require_tracker(tracker, "mleforge sft")
    config = TrainConfig(model=ModelConfig(spec=f"hf:{tiny}"), tasks="titanic", eval_tasks="", warm_start="none",
                         report_to=tracker)
    with pytest.raises(MissingExtra, match=f"mleforge train --report-to {tracker}"):
        train(config, tmp_path / "run", registry=registry, progress=False)
    assert not (tmp_path / "run").exists()


def test_only_numbers_go_to_the_tracker():
    line = {"step": 3, "reward_mean": None, "valid_rate": 0.5, "buffer_size": 7, "flag": True, "note": "x"}
    assert scalars(line) == {"mleforge/valid_rate": 0.5, "mleforge/buffer_size": 7.0}
