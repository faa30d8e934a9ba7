"""The flags of `mleforge sft`, `collect` and `eval`: generated from their config dataclasses,
the names users know kept, `--config FILE` under the flags given."""

from __future__ import annotations

import pytest
import yaml

from mleforge.cli.main import build_parser
from mleforge.errors import ConfigError


def parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_collect_flags_and_ideas(tmp_path):
    from mleforge.cli.collect import config_from_args
    from mleforge.expert.collect_config import CollectConfig

    assert config_from_args(parse("collect")) == CollectConfig()
    config = config_from_args(parse("collect", "--tasks", "lite", "--episodes", "2", "--steps", "6", "--out", "D",
                                    "--run-timeout", "30", "--keep-failures", "--isolation", "none"))
    assert (config.episodes, config.steps, config.run_timeout_s, config.keep_failures, config.isolation) == (
        2, 6, 30.0, True, "none")
    for n, low in ((0, 0), (1, 1), (5, 1)):  # --ideas N: at most N ideas, at least min(1, N)
        ideas = config_from_args(parse("collect", "--ideas", str(n)))
        assert (ideas.ideas_low, ideas.ideas_high) == (low, n)
    file = tmp_path / "collect.yaml"
    file.write_text(yaml.safe_dump({"episodes": 4, "steps": 3, "embedder": "tfidf"}))
    given = config_from_args(parse("collect", "--config", str(file), "--steps", "5"))
    assert (given.episodes, given.steps, given.embedder) == (4, 5, "tfidf")
    file.write_text(yaml.safe_dump({"episode": 4}))
    with pytest.raises(ConfigError, match="episode"):
        config_from_args(parse("collect", "--config", str(file)))


def test_eval_flags_grid_and_stepwise(tmp_path):
    from mleforge.cli.stepwise import eval_configs
    from mleforge.eval.config import EvalConfig
    from mleforge.eval.stepwise_config import StepwiseStatesConfig

    grid, states = eval_configs(parse("eval"))
    assert grid == EvalConfig() and states == StepwiseStatesConfig()
    grid, _ = eval_configs(parse("eval", "--policy", "bundled:smollm2-135m", "--tasks", "titanic", "--seeds", "2",
                                 "--time-limit", "60", "--run-timeout", "30", "--trained-on", "a",
                                 "--trained-on", "b", "--threads", "2", "--engine", "transformers",
                                 "--feedback", "none"))
    assert (grid.policy, grid.tasks, grid.seeds, grid.time_limit_s, grid.run_timeout_s, grid.feedback) == (
        "bundled:smollm2-135m", "titanic", 2, 60.0, 30.0, "none")
    assert grid.train_runs == ("a", "b") and grid.policy_options == {"num_threads": 2, "engine": "transformers"}
    file = tmp_path / "eval.yaml"
    file.write_text(yaml.safe_dump({"tasks": "penguins", "states": 4, "prompt_profile": "compact"}))
    grid, states = eval_configs(parse("eval", "--stepwise", "--config", str(file), "--states", "6",
                                      "--stages", "debug,improve"))
    assert (grid.tasks, states.states, states.prompt_profile, states.stages) == (
        "penguins", 6, "compact", ("debug", "improve"))
    with pytest.raises(ConfigError, match="apply to local models"):
        eval_configs(parse("eval", "--policy", "template", "--engine", "ct2"))


def test_sft_flags_and_its_config_file(tmp_path):
    from mleforge.cli.sft import sft_config

    config = sft_config(parse("sft", "--samples", "X", "--model", "M", "--lr", "1e-4", "--max-steps", "3",
                              "--lora-rank", "8", "--batch-size", "1", "--grad-accum", "2", "--loss-samples", "4"))
    assert (config.samples, config.out, config.model.spec, config.model.lora_rank) == ("X", "runs/sft/M", "M", 8)
    assert (config.sft.lr, config.sft.max_steps, config.sft.batch_size, config.sft.grad_accum,
            config.sft.loss_samples) == (1e-4, 3, 1, 2, 4)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()))  # as mleforge sft writes it in its run directory
    assert sft_config(parse("sft", "--config", str(path))) == config
    assert sft_config(parse("sft", "--config", str(path), "--lr", "0.01")).sft.lr == 0.01
    with pytest.raises(ConfigError, match="sft.samples"):
        sft_config(parse("sft"))
