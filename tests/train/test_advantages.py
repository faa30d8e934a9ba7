"""GRPO's settings of issue 32: invalid_groups (mleforge.train.grpo.advantages and the trainer's
advantage path), warmup, groups per step, beta and scale_rewards as TRL receives them."""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from types import SimpleNamespace

import pytest

from mleforge import config as tree
from mleforge.errors import ConfigError
from mleforge.reward import RewardConfig
from mleforge.train.config import TrainConfig
from mleforge.train.grpo.advantages import invalid_groups_of, treat_invalid_groups

LOWEST = RewardConfig().lowest_valid_reward  # 9.4e-14: every failure reward is below it
NAN = float("nan")
# Group 0: failures only (an invalid submission among crashes); group 1: two valid runs.
REWARDS = [-0.2, -0.1, -0.2, -0.2, 0.6, 0.5, -0.3, 0.7]
TRL = [-0.5, 1.5, -0.5, -0.5, 0.6, 0.3, -1.4, 0.5]  # any advantages: the valid group's must come back as they are


def trl_group_advantages(rewards: list[float], group_size: int) -> list[float]:
    """TRL 1.16's scale_rewards "group": (r - mean) / (std + 1e-4), std with ddof 1."""
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))
        out += [(r - mean) / (std + 1e-4) for r in group]
    return out


def test_standardisation_makes_unit_advantages_of_a_failure_groups_small_gaps():
    # Why the setting exists: 0.1 apart, the failures become advantages as large as a success's.
    # mean -0.175, deviations (-0.025, 0.075, -0.025, -0.025), std sqrt(0.0075 / 3) = 0.05.
    assert trl_group_advantages(REWARDS[:4], 4) == pytest.approx([-0.499, 1.497, -0.499, -0.499], abs=1e-3)


def test_invalid_groups_are_those_without_a_valid_rollout():
    assert invalid_groups_of(REWARDS, 4, LOWEST) == [True, False]
    assert invalid_groups_of([0.5, NAN, None, -0.3], 2, LOWEST) == [False, True]  # lost is not valid
    assert invalid_groups_of([LOWEST, -0.1], 2, LOWEST) == [False]  # the worst valid run is valid
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        invalid_groups_of(REWARDS[:6], 4, LOWEST)


def test_standardize_leaves_trls_advantages_as_they_are():
    assert treat_invalid_groups(TRL, REWARDS, 4, LOWEST, "standardize") == TRL


def test_zero_takes_every_advantage_of_a_group_without_a_valid_rollout():
    assert treat_invalid_groups(TRL, REWARDS, 4, LOWEST, "zero") == [0.0] * 4 + TRL[4:]


def test_raw_gives_the_failures_gaps_unscaled():
    treated = treat_invalid_groups(TRL, REWARDS, 4, LOWEST, "raw")
    assert treated[:4] == pytest.approx([-0.025, 0.075, -0.025, -0.025], abs=1e-12)  # r - (-0.175)
    assert treated[4:] == TRL[4:]


def test_a_lost_rollout_keeps_advantage_zero_and_stays_out_of_the_mean():
    rewards = [-0.2, NAN, -0.1, -0.3, NAN, NAN]  # group 0's scored mean -0.15; group 1's one scored -0.3
    advantages = [-0.7, 0.0, 0.7, 0.0, 0.0, 0.0]
    assert treat_invalid_groups(advantages, rewards, 3, LOWEST, "raw") == pytest.approx([-0.05, 0, 0.05, 0, 0, 0])
    assert treat_invalid_groups(advantages, rewards, 3, LOWEST, "zero") == [0.0] * 6
    with pytest.raises(ValueError, match="mode must be one of standardize, zero, raw"):
        treat_invalid_groups(advantages, rewards, 3, LOWEST, "clip")


def _trainer_stand_in(mode: str, rewards: list[float], process: int = 0):
    torch = pytest.importorskip("torch")
    return SimpleNamespace(
        _step_rewards=torch.tensor([[r] for r in rewards]), valid_from=LOWEST, invalid_groups=mode,
        model=SimpleNamespace(training=True), reward_weights=torch.ones(1), num_generations=4,
        _metrics={"train": defaultdict(list)}, accelerator=SimpleNamespace(process_index=process))


@pytest.mark.parametrize("mode, first_group", [("standardize", TRL[:4]), ("zero", [0.0] * 4),
                                               ("raw", [-0.025, 0.075, -0.025, -0.025])])
def test_the_trainers_advantage_path_treats_the_invalid_groups(mode, first_group):
    torch = pytest.importorskip("torch")
    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer

    stand_in = _trainer_stand_in(mode, REWARDS)
    output = {"advantages": torch.tensor(TRL), "prompt_ids": None}
    treated = CurriculumGRPOTrainer._treat_invalid_groups(stand_in, output, len(TRL))
    assert treated["advantages"].tolist() == pytest.approx(first_group + TRL[4:], abs=1e-6)
    assert stand_in._metrics["train"]["frac_groups_no_valid"] == [0.5]


def test_the_trainer_treats_the_rows_of_its_own_process():
    torch = pytest.importorskip("torch")
    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer

    stand_in = _trainer_stand_in("zero", REWARDS[4:] + REWARDS[:4], process=1)  # process 1 holds the failures
    output = {"advantages": torch.tensor(TRL[:4])}
    assert CurriculumGRPOTrainer._treat_invalid_groups(stand_in, output, 4)["advantages"].tolist() == [0.0] * 4
    stand_in = _trainer_stand_in("zero", REWARDS[4:] + REWARDS[:4], process=0)
    output = {"advantages": torch.tensor(TRL[4:])}
    assert CurriculumGRPOTrainer._treat_invalid_groups(stand_in, output, 4)["advantages"].tolist() == \
        pytest.approx(TRL[4:])


def test_the_worst_valid_run_stays_valid_in_trls_float32_rewards():
    torch = pytest.importorskip("torch")
    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer

    # A valid run at the clipped delta earns exactly LOWEST; TRL's float32 tensor rounds it below
    # the float64 LOWEST (9.3576229688e-14 -> 9.3576229122e-14). Its group has a valid rollout.
    assert torch.tensor([LOWEST]).item() < LOWEST
    rewards = [LOWEST, -0.1, -0.2, -0.2]
    stand_in = _trainer_stand_in("zero", rewards)
    output = {"advantages": torch.tensor(TRL[:4])}
    assert CurriculumGRPOTrainer._treat_invalid_groups(stand_in, output, 4)["advantages"].tolist() == \
        pytest.approx(TRL[:4])
    assert stand_in._metrics["train"]["frac_groups_no_valid"] == [0.0]


# --- the settings in the config tree ---------------------------------------------------------------


def test_the_defaults_keep_what_runs_did():
    config = TrainConfig()
    assert (config.invalid_groups, config.warmup, config.scale_rewards, config.beta, config.groups_per_step,
            config.lr_scheduler) == ("standardize", 0.0, "group", 0.0, 1, "constant")


def test_each_setting_is_a_flag():
    parser = argparse.ArgumentParser()
    tree.add_arguments(parser, TrainConfig)
    given = tree.given(parser.parse_args(["--invalid-groups", "raw", "--warmup", "0.25", "--beta", "0.04",
                                          "--scale-rewards", "none", "--lr-scheduler", "linear"]))
    config = TrainConfig.from_dict(given)
    assert (config.invalid_groups, config.warmup, config.beta, config.scale_rewards) == ("raw", 0.25, 0.04, "none")


@pytest.mark.parametrize("changes, message", [
    ({"invalid_groups": "drop"}, "invalid_groups"),
    ({"warmup": -1.0, "lr_scheduler": "linear"}, "warmup"),
    ({"warmup": 2.5, "lr_scheduler": "linear", "steps": 8}, "whole steps"),
    ({"warmup": 9, "lr_scheduler": "linear", "steps": 8}, "never reach lr"),
    ({"warmup": 2}, "constant has no warm-up"),
    ({"beta": -0.1}, "beta"),
    ({"scale_rewards": "std"}, "scale_rewards"),
])
def test_bad_settings_are_refused_with_what_to_do(changes, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**changes)


def test_trl_receives_warmup_beta_scaling_and_one_optimizer_step_per_step(tmp_path):
    pytest.importorskip("trl")
    from mleforge.train.grpo.training import grpo_args

    config = TrainConfig(steps=8, groups_per_step=4, warmup=0.25, lr_scheduler="constant_with_warmup", beta=0.04,
                         scale_rewards="batch")
    args = grpo_args(SimpleNamespace(config=config, world_size=1), tmp_path, "cpu")
    # 4 groups of 4 in micro-batches of one group: 4 accumulated passes, one optimizer step per generation.
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.steps_per_generation) == (4, 4, 4)
    assert args.get_warmup_steps(config.steps) == 2
    assert (args.beta, args.scale_rewards, args.lr_scheduler_type) == (0.04, "batch", "constant_with_warmup")
    whole = grpo_args(SimpleNamespace(config=TrainConfig(steps=8, warmup=3, lr_scheduler="linear"), world_size=1),
                      tmp_path, "cpu")
    assert whole.get_warmup_steps(8) == 3 and whole.gradient_accumulation_steps == 1


def test_the_null_controls_permutation_stays_within_each_group_and_repeats_by_seed():
    from mleforge.train.grpo.advantages import group_permutation

    order = group_permutation(12, 4, seed=7)
    assert [sorted(order[g:g + 4]) for g in (0, 4, 8)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert order == group_permutation(12, 4, seed=7)
    assert any(group_permutation(12, 4, seed=s) != list(range(12)) for s in range(3))  # it does move rows
    with pytest.raises(ValueError, match="do not split"):
        group_permutation(6, 4, seed=0)
    assert TrainConfig(shuffle_rewards=True).shuffle_rewards and not TrainConfig().shuffle_rewards


def _shuffling_trainer(monkeypatch, rewards: list[float], *, shuffle: bool, training: bool = True, step: int = 3):
    """A CurriculumGRPOTrainer with no __init__ run, TRL's own _calculate_rewards replaced by one
    that returns `rewards` (one reward function): only the project's override runs for real."""
    torch = pytest.importorskip("torch")
    from trl import GRPOTrainer

    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer

    monkeypatch.setattr(GRPOTrainer, "_calculate_rewards",
                        lambda self, *a, **k: torch.tensor([[r] for r in rewards]))
    trainer = CurriculumGRPOTrainer.__new__(CurriculumGRPOTrainer)
    trainer.__dict__.update(shuffle_rewards=shuffle, run_seed=11, num_generations=4,
                            state=SimpleNamespace(global_step=step), model=SimpleNamespace(training=training))
    return trainer


def test_the_trainers_null_control_permutes_each_groups_rewards_by_the_steps_seed(monkeypatch):
    """TrainConfig.shuffle_rewards through the trainer's _calculate_rewards (what learning.py's null
    arm runs): each group keeps its own rewards, moved among its rows by group_permutation at the
    run's seed for the step; off, or outside training (an evaluation), the rewards are TRL's."""
    from mleforge.policies.base import derive_seed
    from mleforge.train.grpo.advantages import group_permutation

    rewards = [float(i) for i in range(12)]  # three groups of four, every reward distinct
    shuffled = _shuffling_trainer(monkeypatch, rewards, shuffle=True)._calculate_rewards(None, None, None, None)
    got = [row[0] for row in shuffled.tolist()]
    order = group_permutation(12, 4, derive_seed(11, 3, -1))
    assert got == [rewards[i] for i in order]
    assert [sorted(got[g:g + 4]) for g in (0, 4, 8)] == [rewards[0:4], rewards[4:8], rewards[8:12]]
    assert any(group_permutation(12, 4, derive_seed(11, s, -1)) != list(range(12)) for s in range(3))
    trainer = _shuffling_trainer(monkeypatch, rewards, shuffle=True, step=3)
    assert trainer._calculate_rewards(None, None, None, None).tolist() == shuffled.tolist()  # repeats by seed
    assert trainer._step_rewards.tolist() == shuffled.tolist()  # invalid_groups sees the rewards TRL uses
    for shuffle, training in ((False, True), (True, False)):
        kept = _shuffling_trainer(monkeypatch, rewards, shuffle=shuffle, training=training)
        assert [row[0] for row in kept._calculate_rewards(None, None, None, None).tolist()] == rewards
