"""ModelConfig.prompt_grad: the presets, the refusal under activation checkpointing, the flags,
old run directories that read as what they ran, and the setting reaching the GRPO update of a
real step and the SFT trainer. The gradients themselves are checked in test_trainer_logps.py
(GRPO) and test_sft_trainer.py (SFT)."""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("trl")

from mleforge.errors import ConfigError  # noqa: E402
from mleforge.train.config import ModelConfig, SFTRunConfig, TrainConfig  # noqa: E402
from mleforge.train.errors import TrainError  # noqa: E402
from mleforge.train.recipe import load_run_config  # noqa: E402
from mleforge.train.sft import _check_same_run  # noqa: E402
from tests.train.test_cli import one_step  # noqa: E402


def test_presets_and_the_checkpointing_refusal(capsys):
    assert TrainConfig().model.prompt_grad is False and ModelConfig().prompt_grad is False
    assert TrainConfig.preset_config("cpu").model.prompt_grad is False
    assert TrainConfig.preset_config("gpu-1x").model.prompt_grad is True
    assert TrainConfig.preset_config("cpu", model={"prompt_grad": True}).model.prompt_grad is True
    with pytest.raises(ConfigError, match="activation checkpointing turns off"):
        ModelConfig(gradient_checkpointing=True)
    with pytest.raises(ConfigError, match="activation checkpointing turns off"):
        TrainConfig.preset_config("gpu-1x", model={"prompt_grad": False})
    with pytest.raises(ConfigError, match=r"model.prompt_grad: got 'no'; expected true or false"):
        ModelConfig(prompt_grad="no")
    from mleforge.cli.main import build_parser
    from mleforge.config import given

    parser = build_parser()
    for word, value in (("on", True), (" OFF ", False)):
        assert given(parser.parse_args(["train", "--prompt-grad", word])) == {"model": {"prompt_grad": value}}
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--prompt-grad", "maybe"])
    assert "give on or off" in capsys.readouterr().err


def test_the_flags_set_it():
    from mleforge.cli.main import build_parser
    from mleforge.cli.sft import sft_config
    from mleforge.cli.train import overrides
    from mleforge.config import given

    parser = build_parser()
    assert overrides(parser.parse_args(["train", "--prompt-grad", "on"]))["model"] == {"prompt_grad": True}
    assert "model" not in overrides(parser.parse_args(["train"]))
    assert sft_config(parser.parse_args(["sft", "--samples", "s", "--prompt-grad", "off"])).model.prompt_grad is False
    assert "model" not in given(parser.parse_args(["sft", "--samples", "s"]))


def test_a_run_from_before_the_setting_resumes_as_it_ran(tmp_path):
    saved = TrainConfig().to_dict()
    del saved["model"]["prompt_grad"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load_run_config(tmp_path).model.prompt_grad is True
    # an SFT run directory of the same age: the same run with the prompt's gradient, another without
    sft = tmp_path / "sft"
    sft.mkdir()
    old = SFTRunConfig(samples="s.jsonl", out=str(sft)).to_dict()
    del old["model"]["prompt_grad"]
    (sft / "config.yaml").write_text(yaml.safe_dump(old))
    _check_same_run(sft, SFTRunConfig(samples="s.jsonl", out=str(sft), model=ModelConfig(prompt_grad=True)))
    with pytest.raises(TrainError, match=r"different model\.prompt_grad\)"):
        _check_same_run(sft, SFTRunConfig(samples="s.jsonl", out=str(sft)))


@pytest.mark.parametrize("flag", ["on", None])
def test_a_step_takes_the_setting_to_the_trainer(flag, tiny, titanic, journals, data_root, tmp_path, monkeypatch):
    import mleforge.train.grpo.trainer as trainer

    seen = []
    original = trainer.completion_logps

    def spy(*args, **kwargs):
        seen.append(kwargs["prompt_grad"])
        return original(*args, **kwargs)

    monkeypatch.setattr(trainer, "completion_logps", spy)
    run = tmp_path / "run"
    assert one_step(tiny, journals, data_root, run, *(["--prompt-grad", flag] if flag else []))["steps"] == 1
    want = flag == "on"  # the cpu preset's default: off
    assert seen and set(seen) == {want}
    assert yaml.safe_load((run / "config.yaml").read_text())["model"]["prompt_grad"] is want
    assert (run / "final" / "adapter_config.json").is_file()


@pytest.mark.parametrize("prompt_grad", [True, False])
def test_sft_takes_the_setting_to_its_trainer(prompt_grad, tiny, tmp_path):
    from datasets import Dataset

    from mleforge.train.model import load_for_training
    from mleforge.train.sft import sft_trainer

    config = SFTRunConfig(samples="-", out=str(tmp_path), model=ModelConfig(spec=f"hf:{tiny}", prompt_grad=prompt_grad))
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": "q"}],
                               "completion": [{"role": "assistant", "content": "a"}]}])
    trainer = sft_trainer(config, load_for_training(config.model), data, tmp_path / "checkpoints")
    assert trainer.prompt_grad is prompt_grad
