"""The config tree (mleforge.config): nested configs from dicts, dotted overrides, flags generated
from the fields, the precedence defaults < preset < file < flags, and configs written before it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from mleforge import config as tree
from mleforge.errors import ConfigError
from mleforge.eval.stepwise_config import StepwiseConfig
from mleforge.train.config import (
    FLAT_KEYS,
    SFTRunConfig,
    TrainConfig,
    upgrade_sft_run_dict,
    upgrade_train_dict,
)

FIXTURES = Path(__file__).parent / "train" / "fixtures"


@dataclass(frozen=True)
class Inner:
    rate: float = 0.5
    names: tuple[str, ...] = ("a", "b")
    limit: int | None = field(default=None, metadata={"none": "all", "aliases": ("--limit",)})
    mode: str = field(default="x", metadata={"choices": ("x", "y", "none")})
    mode_or_null: str | None = field(default=None, metadata={"choices": ("x", "none")})


@dataclass(frozen=True)
class Outer:
    steps: int = field(default=1, metadata={"help": "how many"})
    on: bool = field(default=True, metadata={"negative": "--no-on"})
    inner: Inner = field(default_factory=lambda: Inner(rate=0.25), metadata={"aliases": {"rate": ("--rate",)}})

    def __post_init__(self) -> None:
        tree.build_sections(self)


def parse(*argv: str) -> dict:
    parser = argparse.ArgumentParser()
    tree.add_arguments(parser, Outer)
    return tree.given(parser.parse_args(list(argv)))


def test_from_dict_builds_nested_configs_and_refuses_unknown_keys():
    built = tree.from_dict(Outer, {"steps": 3, "inner": {"names": ["c"], "limit": 4}})
    assert built == Outer(steps=3, inner=Inner(rate=0.25, names=("c",), limit=4))  # the field's default section
    assert tree.to_dict(built) == {"steps": 3, "on": True, "inner": {"rate": 0.25, "names": ["c"], "limit": 4,
                                                                     "mode": "x", "mode_or_null": None}}
    with pytest.raises(ConfigError, match=r"Inner: unknown keys speed; known: rate, names, limit"):
        tree.from_dict(Outer, {"inner": {"speed": 1}})
    with pytest.raises(ConfigError, match="expected a mapping"):
        tree.from_dict(Outer, [1])
    assert Outer(inner={"limit": 2}).inner == Inner(rate=0.25, limit=2)


def test_dotted_overrides_and_merge():
    data = tree.set_dotted({"a": {"b": 1, "c": 2}}, "a.b", 5)
    assert data == {"a": {"b": 5, "c": 2}} and tree.set_dotted({}, "x.y.z", 1) == {"x": {"y": {"z": 1}}}
    assert tree.merge({"a": {"b": 1, "c": 2}, "d": 1}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}, "d": 1}
    assert tree.changed_paths({"a": {"b": 1}, "c": 1}, {"a": {"b": 2}, "c": 1}) == ["a.b"]


def test_flags_are_generated_from_the_fields():
    assert parse() == {}  # nothing given: nothing overrides
    assert parse("--steps", "2", "--inner.rate", "0.1") == {"steps": 2, "inner": {"rate": 0.1}}
    assert parse("--rate", "0.2", "--limit", "all") == {"inner": {"rate": 0.2, "limit": None}}  # aliases
    assert parse("--inner.limit", "7") == {"inner": {"limit": 7}}
    assert parse("--inner.limit", "null") == parse("--inner.limit", "none") == {"inner": {"limit": None}}
    assert parse("--inner.names", "p, q") == {"inner": {"names": ("p", "q")}}
    assert parse("--on", "off") == parse("--no-on") == {"on": False}
    assert parse("--on") == parse("--on", "true") == {"on": True}
    assert parse("--inner.mode_or_null", "none") == {"inner": {"mode_or_null": "none"}}  # a choice, not None
    assert parse("--inner.mode-or-null", "null") == {"inner": {"mode_or_null": None}}
    for bad in (("--steps", "x"), ("--on", "maybe"), ("--inner.mode", "z")):
        with pytest.raises(SystemExit):
            parse(*bad)


def test_every_field_of_the_train_tree_is_a_flag():
    from mleforge.cli.main import build_parser

    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    dests = {action.dest for action in train._actions}
    paths = tree.flag_paths(TrainConfig)
    assert len(paths) > 100 and all(tree.DEST + path in dests for path in paths)
    args = parser.parse_args(["train", "--reward.alpha", "2", "--buffer.max-states", "500",
                              "--learnability.exploration_c", "0.3", "--prompt.packages", "numpy,pandas"])
    assert tree.given(args) == {"reward": {"alpha": 2.0}, "buffer": {"max_states": 500},
                                "learnability": {"exploration_c": 0.3}, "prompt": {"packages": ("numpy", "pandas")}}


def test_precedence_defaults_preset_file_flags(tmp_path):
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import train_config

    parser = build_parser()
    assert train_config(parser.parse_args(["train"])) == TrainConfig()
    file = tmp_path / "run.yaml"
    file.write_text(yaml.safe_dump({"preset": "gpu-1x", "steps": 7, "sft": {"lr": 0.001}, "reward": {"alpha": 3.0}}))
    config = train_config(parser.parse_args(["train", "--config", str(file), "--steps", "9", "--reward.alpha", "4"]))
    gpu = TrainConfig.preset_config("gpu-1x")
    assert (config.preset, config.group_size, config.sft.max_steps) == ("gpu-1x", gpu.group_size, gpu.sft.max_steps)
    assert (config.steps, config.sft.lr, config.reward.alpha) == (9, 0.001, 4.0)  # flags over the file
    cpu = train_config(parser.parse_args(["train", "--config", str(file), "--preset", "cpu"]))
    assert (cpu.preset, cpu.group_size, cpu.steps) == ("cpu", 4, 7)  # the flag's preset under the file


def test_a_runs_config_yaml_is_a_valid_config_file(tmp_path):
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import train_config

    for config in (TrainConfig.preset_config("gpu-1x", steps=3, reward={"alpha": 2.0}),
                   TrainConfig(warm_start="none", sandbox={"executor": "local"})):
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))  # as mleforge.train.recipe writes it
        assert train_config(build_parser().parse_args(["train", "--config", str(path)])) == config


@pytest.mark.parametrize("name", ["cpu", "gpu-1x"])
def test_flat_configs_from_before_the_tree_map_onto_it(name, tmp_path):
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import train_config
    from mleforge.train.recipe import load_run_config

    flat = yaml.safe_load((FIXTURES / f"legacy-{name}.yaml").read_text())  # TrainConfig().to_dict() of main
    assert set(FLAT_KEYS) <= set(flat)
    # as that run ran: its eval tasks, whether it evaluated its warm start, one completion a state, no headroom rule
    ran = TrainConfig.preset_config(name, eval_tasks=flat["eval_tasks"], stepwise={
        "after_sft": flat["stepwise_after_sft"], "states": flat["stepwise_states"], **StepwiseConfig.LEGACY})
    assert TrainConfig.from_dict(upgrade_train_dict(flat)) == ran
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(flat))
    assert load_run_config(tmp_path) == ran
    path = str(tmp_path / "config.yaml")
    preset = TrainConfig.preset_config(name).stepwise  # a file a user gives: settings it lacks are the preset's
    assert train_config(build_parser().parse_args(["train", "--config", path])) == ran.replace(
        stepwise={"samples": preset.samples, "headroom": preset.headroom})
    # a missing key reads as what a run of its time did (the warm start's evaluation, the prompt's gradient)
    del flat["stepwise_after_sft"], flat["model"]["prompt_grad"]
    upgraded = TrainConfig.from_dict(upgrade_train_dict(flat))
    assert upgraded.stepwise.after_sft is True and upgraded.model.prompt_grad is True
    flat["sft"] = "runs/sft/x"
    assert TrainConfig.from_dict(upgrade_train_dict(flat)).warm_start == "runs/sft/x"


def test_a_flat_sft_config_maps_onto_the_sft_run_config():
    config = SFTRunConfig(samples="s.jsonl", out="o", stages=("debug",), seed=2, sft={"lr": 0.01, "max_steps": 3})
    nested = config.to_dict()
    flat = {k: v for k, v in nested.items() if k != "sft"} | nested["sft"]
    assert upgrade_sft_run_dict(flat) == nested
    del flat["loss_samples"]  # written before the setting existed: its default
    assert upgrade_sft_run_dict(flat) == nested


def test_the_sft_and_train_commands_keep_the_flags_users_know():
    from mleforge.cli.main import build_parser
    from mleforge.cli.sft import sft_config
    from mleforge.cli.train import train_config

    parser = build_parser()
    sft = sft_config(parser.parse_args(["sft", "--samples", "X", "--model", "M", "--lr", "1e-4", "--max-steps", "3",
                                        "--lora-layers", "all", "--stages", "debug"]))
    assert (sft.samples, sft.out, sft.model.spec, sft.sft.lr, sft.sft.max_steps, sft.stages) == (
        "X", "runs/sft/M", "M", 1e-4, 3, ("debug",))
    train = train_config(parser.parse_args([
        "train", "--sft", "none", "--executor", "local", "--isolation", "none", "--generation", "ct2",
        "--sync-every", "1", "--eval-after-sft", "on", "--engine", "transformers", "--expert-steps", "3",
        "--sft-steps", "5", "--stepwise-states", "2", "--exec-workers", "2", "--threads", "1"]))
    assert (train.warm_start, train.sandbox.executor, train.sandbox.isolation, train.generation.backend) == (
        "none", "local", "none", "ct2")
    assert (train.stepwise.after_sft, train.stepwise.engine, train.stepwise.states) == (True, "transformers", 2)
    assert (train.collect.steps, train.sft.max_steps, train.sandbox.exec_workers, train.model.threads) == (3, 5, 2, 1)


def test_a_file_a_user_writes_gets_the_defaults_and_a_runs_own_reads_as_it_ran(tmp_path):
    from mleforge.cli.main import build_parser
    from mleforge.cli.sft import sft_config
    from mleforge.cli.train import train_config

    parser = build_parser()
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"model": {"lora_rank": 8}, "sft": "none", "generation": "trl"}))
    config = train_config(parser.parse_args(["train", "--config", str(mine)]))
    assert (config.model.lora_rank, config.warm_start, config.generation.backend) == (8, "none", "trl")
    assert (config.model.prompt_grad, config.stepwise.samples) == (False, 2)  # the defaults, not LEGACY
    model_only = tmp_path / "model.yaml"
    model_only.write_text(yaml.safe_dump({"model": {"lora_rank": 8}}))
    sft = sft_config(parser.parse_args(["sft", "--config", str(model_only), "--samples", "s.jsonl"]))
    assert (sft.model.lora_rank, sft.model.prompt_grad) == (8, False)
    # the same keys in a run's own config.yaml (a run record beside it) read as that run ran
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(mine.read_text())
    (run / "run.json").write_text("{}")
    config = train_config(parser.parse_args(["train", "--config", str(run / "config.yaml")]))
    assert (config.model.prompt_grad, config.stepwise.after_sft) == (True, True)
    assert (config.stepwise.samples, config.stepwise.headroom) == (1, "any")
    (run / "config.yaml").write_text(yaml.safe_dump(TrainConfig().to_dict()))
    with pytest.raises(ConfigError, match="the config of a run with preset cpu"):
        train_config(parser.parse_args(["train", "--config", str(run / "config.yaml"), "--preset", "gpu-1x"]))
