"""Training configs and presets, the generation seam, checkpoint completeness: no model needed."""

from __future__ import annotations

import json

import pytest
import yaml

from mleforge.errors import ConfigError
from mleforge.train.checkpoint_marks import MARK, discard_after, last_checkpoint
from mleforge.train.config import PRESETS, ModelConfig, SFTRunConfig, TrainConfig
from mleforge.train.errors import TrainError
from mleforge.train.grpo.generation import register_engine, resolve_generation, trl_generation_args
from mleforge.train.model import cpu_has_bf16
from mleforge.train.prompt_renderer import compact_prompt


def test_the_defaults_are_the_cpu_preset_and_every_preset_validates():
    cpu = TrainConfig()
    assert TrainConfig.preset_config("cpu") == cpu
    assert (cpu.model.spec, cpu.model.full, cpu.tasks, cpu.group_size, cpu.sampler.kind, cpu.warm_start) == (
        "bundled:qwen2.5-coder-0.5b", False, "lite", 4, "learnability", "auto")
    assert cpu.seed_stages == ("debug", "improve") and cpu.sequences_per_step == 4
    for name in PRESETS:
        config = TrainConfig.preset_config(name)
        assert TrainConfig.from_dict(yaml.safe_load(yaml.safe_dump(config.to_dict()))) == config
    gpu = TrainConfig.preset_config("gpu-1x", steps=10, model={"lora_rank": 32})
    assert (gpu.group_size, gpu.bf16, gpu.model.dtype, gpu.model.lora_rank, gpu.steps) == (8, True, "bfloat16", 32, 10)
    assert gpu.prompt != cpu.prompt  # the full prompt on a GPU, the compact one on a CPU


def test_a_micro_batch_is_one_group_unless_given():
    assert TrainConfig().micro_batch == 4  # the group: its prompt runs once on a CPU
    assert TrainConfig(group_size=6, groups_per_step=2).micro_batch == 6
    assert TrainConfig(group_size=6, groups_per_step=2, micro_batch=12).micro_batch == 12
    assert TrainConfig.preset_config("gpu-1x").micro_batch == 8
    assert TrainConfig.from_dict({**TrainConfig().to_dict(), "micro_batch": None}).micro_batch == 4


@pytest.mark.parametrize("changes, message", [
    ({"group_size": 1}, "group_size: got 1"),
    ({"steps": 0}, "steps: got 0"),
    ({"lr": 0.0}, "lr: got 0.0; expected > 0.0"),
    ({"sampler": "greedy"}, "sampler.kind: got 'greedy'; expected one of uniform, learnability"),
    ({"micro_batch": 3}, "4 sequences must split into whole micro-batches"),
    ({"save_steps": 9}, "save_steps (9) > buffer.retain_evicted_steps (4)"),
    ({"save_total_limit": 1}, "save_total_limit: got 1"),
    ({"seed_stages": ("draft", "plan")}, "seed_stages: got 'plan'"),
    ({"loss_type": "ppo"}, "loss_type: got 'ppo'"),
    ({"preset": "tpu"}, "preset: got 'tpu'"),
    ({"model": {"lora_rank": 0}}, "model.lora_rank: got 0"),
    ({"model": {"flash": True}}, "ModelConfig: unknown keys flash"),
    ({"feedback": "private"}, "feedback: got 'private'; expected one of public, none"),
    ({"sandbox": {"isolation": "docker"}}, "isolation: got 'docker'"),
    ({"sandbox": {"executor": "k8s"}}, "executor: got 'k8s'"),
])
def test_bad_values_are_refused_with_the_reason(changes, message):
    with pytest.raises(ConfigError) as info:
        TrainConfig(**changes)
    assert message in str(info.value)


def test_sft_config_and_sft_modes():
    assert TrainConfig(warm_start="none").warm_start_mode == "none"
    assert TrainConfig(warm_start="runs/sft/x").warm_start_mode == "path"
    with pytest.raises(ConfigError, match="sft.samples"):
        SFTRunConfig(out="x")
    config = SFTRunConfig(samples="s.jsonl", out="o", stages=["debug"], model={"spec": "hf:m", "full": True})
    assert config.model == ModelConfig(spec="hf:m", full=True) and config.stages == ("debug",)
    assert SFTRunConfig.from_dict(yaml.safe_load(yaml.safe_dump(config.to_dict()))) == config


def test_the_compact_prompt_profile():
    from mleforge.agent.prompt_config import COMPACT_CODE_CHARS, PromptConfig

    prompt = compact_prompt()  # the compact preset's budgets, not a bare profile="compact"
    assert prompt == PromptConfig.compact() == PromptConfig.for_profile("compact", code_chars=COMPACT_CODE_CHARS)
    assert (prompt.profile, prompt.memory_nodes, prompt.output_tail_chars, prompt.code_chars) == (
        "compact", 0, 350, COMPACT_CODE_CHARS)
    assert TrainConfig().prompt == prompt and TrainConfig.preset_config("gpu-1x").prompt.profile == "full"


def test_eval_tasks_leave_the_group_and_the_reward_neutral_reaches_the_curriculum():
    from mleforge.reward import RewardConfig

    cpu = TrainConfig()
    assert (cpu.eval_tasks, cpu.stepwise.states, cpu.stepwise.engine, cpu.stepwise.quantization) == (
        "diabetes,telco-churn", 6, "auto", None)
    assert (cpu.stepwise.after_sft, cpu.stepwise.headroom, cpu.stepwise.samples) == (True, "prefer", 2)
    gpu = TrainConfig.preset_config("gpu-1x").stepwise
    assert (gpu.states, gpu.samples, gpu.after_sft) == (16, 4, True)
    assert cpu.learnability.improve_neutral == 0.5
    floored = TrainConfig(reward=RewardConfig(r_format=0.0, r_fail=0.1, r_invalid=0.2, valid_floor=0.4))
    assert floored.learnability.improve_neutral == pytest.approx(0.7)  # 0.4 + 0.6 / 2
    with pytest.raises(ConfigError, match="quantization applies to the ct2 engine"):
        TrainConfig(stepwise={"engine": "transformers", "quantization": "int8"})


def test_generation_backends():
    assert resolve_generation("auto", cuda=False) == "trl"
    assert resolve_generation("trl", cuda=True) == "trl"
    with pytest.raises(TrainError, match="needs a CUDA GPU|needs the vllm package"):
        resolve_generation("vllm", cuda=False)
    with pytest.raises(ConfigError, match="expected one of auto, trl, vllm"):
        resolve_generation("ct2-not-registered", cuda=False)
    with pytest.raises(ValueError, match="built-in"):
        register_engine("trl", lambda config, tokenizer: None)
    args = trl_generation_args(TrainConfig(max_new_tokens=99, temperature=0.8), "vllm")
    assert args["max_completion_length"] == 99 and args["temperature"] == 0.8 and args["use_vllm"] is True


def test_bf16_is_native_only_with_the_cpu_flags():
    assert cpu_has_bf16("flags : fpu sse avx2 avx512f avx512_bf16") is True
    assert cpu_has_bf16("flags : fpu sse avx2 amx_bf16 amx_tile") is True
    assert cpu_has_bf16("flags : fpu sse avx2 avx512f") is False


def test_only_checkpoints_with_their_mark_count(tmp_path):
    for step, complete in ((1, True), (2, True), (3, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / MARK).write_text(json.dumps({"global_step": step}))
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint's name
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert discard_after(tmp_path, 1) == [tmp_path / "checkpoint-2", tmp_path / "checkpoint-3"]
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-1" and last_checkpoint(tmp_path / "none") is None


def test_recover_drops_what_the_resumed_steps_write_again(tmp_path):
    """A run dir killed after step 2's feedback, with checkpoint-2 complete: the buffer goes back
    to step 1, later metrics lines (one half-written) and rollouts go."""
    from mleforge.curriculum.buffer import StateBuffer
    from mleforge.curriculum.records import TaskReference
    from mleforge.train.recipe import recover
    from tests.curriculum.helpers import idea_state, rec

    seed = idea_state("alpha", 0)
    buffer = StateBuffer(tmp_path)
    buffer.set_up([TaskReference("alpha", "higher", 1.0, 0.0)], [seed])
    for step in range(3):
        buffer.apply_feedback(step, [rec(seed, 0.5)], [])
    for step in (1, 2, 3):
        (tmp_path / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True)
    for step in (1, 2):
        (tmp_path / "checkpoints" / f"checkpoint-{step}" / MARK).write_text(json.dumps({"global_step": step}))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(3)) + '{"st')
    (tmp_path / "rollouts").mkdir()
    for step in range(3):
        (tmp_path / "rollouts" / f"step-{step}.jsonl").write_text("{}\n")
    checkpoint, done = recover(tmp_path, buffer)
    assert (checkpoint, done, buffer.sealed_step) == (tmp_path / "checkpoints" / "checkpoint-2", 2, 1)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 0}\n{"step": 1}\n'
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["step-0.jsonl", "step-1.jsonl"]
    assert not (tmp_path / "checkpoints" / "checkpoint-3").exists() and buffer.counts()["rollouts"] == 2
    buffer.close()


def test_train_auto_executor_is_the_pool_wherever_it_isolates(tmp_path, monkeypatch):
    """executor auto: the warm pool when it isolates runs as asked (root or not: its probe is
    a real run), else the local executor, never an unisolated pool in place of isolation."""
    from mleforge.errors import SandboxError
    from mleforge.sandbox import make_executor
    from mleforge.sandbox.local import LocalExecutor
    from mleforge.sandbox.pool.executor import PoolExecutor

    monkeypatch.delenv("MLEFORGE_ISOLATION", raising=False)
    with LocalExecutor("auto", base_dir=tmp_path / "probe") as probe:
        try:
            probe.resolve_isolation()
        except SandboxError as exc:
            pytest.skip(f"bwrap does not work here: {exc}")
    with make_executor("auto", base_dir=tmp_path / "a") as chosen:
        assert type(chosen) is PoolExecutor and chosen.isolation == "bwrap"
    with make_executor("auto", base_dir=tmp_path / "b", isolation="none") as chosen:
        assert type(chosen) is PoolExecutor and chosen.isolation == "none"

    def cannot(self):
        raise SandboxError("no user namespace inside bwrap here")

    monkeypatch.setattr(PoolExecutor, "_choose_isolation", cannot)
    with make_executor("auto", base_dir=tmp_path / "c") as chosen:
        assert type(chosen) is LocalExecutor and chosen.isolation == "bwrap"


def test_the_warm_start_collection_takes_the_runs_own_tasks_seed_sandbox_and_prompt():
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import train_config

    with pytest.raises(ConfigError, match=r"collect.tasks: .*set --tasks instead \(got 'titanic'\)"):
        TrainConfig(collect={"tasks": "titanic"})
    with pytest.raises(ConfigError, match=r"collect.executor: .*set --sandbox.executor instead"):
        train_config(build_parser().parse_args(["train", "--collect.executor", "pool"]))
    config = train_config(build_parser().parse_args(["train", "--collect.episodes", "2", "--expert-steps", "3"]))
    assert (config.collect.episodes, config.collect.steps) == (2, 3)
