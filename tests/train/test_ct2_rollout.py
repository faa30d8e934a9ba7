"""GRPO rollouts on the CTranslate2 engine (generation ct2): the trained weights reach the
engine after each step, a group shares its prompt, the step seed decides the samples, and a
missing ctranslate2 names its extra. A tiny random model, converted for real."""

from __future__ import annotations

import importlib.util
import json
import sys
from types import SimpleNamespace

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from mleforge.errors import ConfigError, MissingExtra  # noqa: E402
from mleforge.policies import SamplingConfig  # noqa: E402
from mleforge.train.config import ModelConfig, TrainConfig  # noqa: E402
from mleforge.train.grpo.ct2_rollout import Ct2Rollout, due_for_sync, group_runs  # noqa: E402
from mleforge.train.grpo.generation import resolve_generation  # noqa: E402


def test_group_runs_and_the_sync_schedule():
    assert group_runs(["a", "a", "a", "b", "b", "a"]) == [(0, 3), (3, 2), (5, 1)]
    assert group_runs([]) == []

    def schedule(every, steps, synced=None):
        synced_at = []
        for step in steps:
            if due_for_sync(step, synced, every):
                synced = step
                synced_at.append(step)
        return synced_at

    assert schedule(1, range(4)) == [0, 1, 2, 3]
    assert schedule(3, range(8)) == [0, 3, 6]
    assert schedule(3, range(3, 8)) == [3, 6]  # resumed at a checkpoint on a sync step: the same weights
    assert due_for_sync(2, 2, 1) is False  # a second generation within one step


def test_rollout_settings_are_checked():
    TrainConfig(generation={"backend": "ct2", "rollout_quantization": "int8", "sync_every": 2}, save_steps=4)
    with pytest.raises(ConfigError, match="apply to engine rollouts"):
        TrainConfig(generation={"backend": "trl", "rollout_quantization": "int8"})
    with pytest.raises(ConfigError, match="apply to engine rollouts"):
        TrainConfig(generation={"backend": "vllm", "sync_every": 2}, save_steps=2)
    with pytest.raises(ConfigError, match="rollout_quantization: got 'int4'"):
        TrainConfig(generation={"backend": "ct2", "rollout_quantization": "int4"})
    with pytest.raises(ConfigError, match=r"save_steps \(3\) must be a multiple of generation.sync_every \(2\)"):
        TrainConfig(generation={"backend": "ct2", "sync_every": 2}, save_steps=3)
    with pytest.raises(ConfigError, match="sync_every: got 0"):
        TrainConfig(generation={"backend": "ct2", "sync_every": 0})


def test_auto_takes_ct2_on_a_cpu_where_it_is_installed_and_converts_the_model(monkeypatch):
    import mleforge.train.grpo.generation as generation

    monkeypatch.setattr(generation, "ct2_installed", lambda: True)
    assert resolve_generation("auto", cuda=False, converts=lambda: True) == "ct2"
    assert resolve_generation("auto", cuda=False, converts=lambda: False) == "trl"
    assert resolve_generation("auto", cuda=False) == "trl"  # nobody asked whether the model converts
    monkeypatch.setattr(generation, "vllm_installed", lambda: False)
    assert resolve_generation("auto", cuda=True, converts=lambda: True) == "trl"  # a GPU: vLLM or TRL's own
    monkeypatch.setattr(generation, "ct2_installed", lambda: False)
    assert resolve_generation("auto", cuda=False, converts=lambda: True) == "trl"


def test_a_missing_ctranslate2_names_the_fast_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # what `import ctranslate2` meets uninstalled
    with pytest.raises(MissingExtra, match=r"pip install 'mleforge\[fast\]'"):
        resolve_generation("ct2", cuda=False)
    with pytest.raises(MissingExtra, match=r"mleforge\[fast\]"):
        Ct2Rollout(TrainConfig(generation={"backend": "ct2"}), tokenizer=None)


def test_the_cli_picks_the_rollout_engine_and_refuses_it_without_ctranslate2(monkeypatch, tiny, data_root, tmp_path,
                                                                             capsys):
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import overrides
    from tests.train.test_cli import BASE, cli

    given = overrides(build_parser().parse_args(["train", "--generation", "ct2", "--rollout-quantization", "int8",
                                                 "--sync-every", "2"]))
    assert given == {"generation": {"backend": "ct2", "rollout_quantization": "int8", "sync_every": 2}}
    with pytest.raises(ConfigError, match="save_steps"):  # the cpu preset checkpoints every step
        TrainConfig.preset_config("cpu", **given)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    code, _ = cli(*BASE, "--model", f"hf:{tiny}", "--generation", "ct2", "--run-dir", str(tmp_path / "run"),
                  "--data-dir", str(data_root))
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and "generation ct2 (GRPO rollouts on ctranslate2) needs the `ctranslate2` package" in err
    assert "pip install 'mleforge[fast]'" in err and not (tmp_path / "run").exists()


# --- on a real model (the rest: ctranslate2 installed) ---

needs_ct2 = pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None,
                               reason="ctranslate2 is not installed (pip install 'mleforge[fast]')")


PROMPTS = [[{"role": "user", "content": "add two numbers"}]] * 2 + [[{"role": "user", "content": "import numpy"}]] * 2


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    """A tiny Qwen2, the bundled Qwen's kind (biased q/k/v, tied embeddings, a padded vocabulary)."""
    from tests.policies.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen") / "model", "qwen2")


@pytest.fixture(params=["llama", "qwen2"])
def lora_model(request, tiny, tiny_qwen):
    """A tiny model in float32 with a LoRA adapter on every linear layer, as training holds it."""
    import peft
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny if request.param == "llama" else tiny_qwen
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    return model, tokenizer


def trainer_at(model, step):
    """What the rollout reads of TRL's trainer: the step, the model, the device."""
    return SimpleNamespace(state=SimpleNamespace(global_step=step), model=model,
                           accelerator=SimpleNamespace(unwrap_model=lambda m: m, device=torch.device("cpu")))


def config(generation=None, **changes):
    return TrainConfig(generation={"backend": "ct2", **(generation or {})}, max_new_tokens=12, temperature=1.0,
                       **changes)


def rollout_at(rollout, model, step, seed):
    torch.manual_seed(seed)  # as the trainer seeds each step (mleforge.train.grpo.trainer)
    return rollout(PROMPTS, trainer_at(model, step))


def greedy(model, tokenizer, ids, n=8):
    """transformers' greedy continuation of `ids` and each token's log-probability."""
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=None)
        tokens = out[0, len(ids):].tolist()
        logits = model(input_ids=out).logits[0, len(ids) - 1:-1]
    return tokens, torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0].tolist()


@needs_ct2
def test_rollouts_share_a_group_prompt_and_repeat_with_the_step_seed(lora_model):
    model, tokenizer = lora_model
    rollout = Ct2Rollout(config(), tokenizer)
    try:
        first = rollout_at(rollout, model, 0, seed=11)
        again = rollout_at(rollout, model, 0, seed=11)
        other = rollout_at(rollout, model, 0, seed=12)
        assert rollout.take_figures(0)["rollout_staleness"] == 0
    finally:
        rollout.close()
    expected = tokenizer.apply_chat_template(PROMPTS[0], add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"]
    assert first["prompt_ids"][0] == first["prompt_ids"][1] == list(expected)
    assert first["prompt_ids"][2] != first["prompt_ids"][0]
    ids = first["completion_ids"]
    assert len(ids) == 4 and all(0 < len(c) <= 12 for c in ids)
    assert ids[0] != ids[1]  # two samples of one prompt (one input, two hypotheses), not one twice
    assert first["logprobs"] is None  # float32: the training weights' own type
    assert again["completion_ids"] == ids  # same step seed, same rollouts
    assert other["completion_ids"] != ids


@needs_ct2
def test_the_engine_follows_the_weights_after_each_step(lora_model):
    """After the weights change (an optimizer step), the next step's rollouts come from the
    new weights: ct2's greedy tokens and their log-probabilities match transformers' on the
    changed model, and differ from before. Between syncs (sync_every 2) they stay stale. The
    engine keeps its weights after a step whose next step does not sync, and lets them go after
    one whose next step does (reloading them where it is asked to generate again before)."""
    model, tokenizer = lora_model
    rollout = Ct2Rollout(config(generation={"sync_every": 2}, save_steps=2), tokenizer)
    ids = rollout.encode(PROMPTS[0], None)
    probe = SamplingConfig(temperature=0, max_new_tokens=8)

    def engine_greedy():
        if rollout.engine.released:
            rollout.engine.reload()
        (sample,) = rollout.engine.generate([ids], 1, probe, seed=0, logprobs=True).samples[0][:1]
        return list(sample.token_ids), list(sample.logprobs)

    try:
        rollout_at(rollout, model, 0, seed=1)
        assert not rollout.engine.released  # step 1 samples from these weights too
        before = greedy(model, tokenizer, ids)
        tokens, logps = engine_greedy()
        assert tokens == before[0] and logps == pytest.approx(before[1], abs=1e-4)
        torch.manual_seed(0)
        with torch.no_grad():  # what an optimizer step does to the adapter: lora_B leaves zero
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.5)
        after = greedy(model, tokenizer, ids)
        assert after[1] != pytest.approx(before[1], abs=1e-3)  # the change shows
        rollout_at(rollout, model, 1, seed=1)  # step 1: not a sync step (every 2), still step 0's weights
        assert rollout.engine.released  # step 2 syncs: no reason to hold them through the update
        again = rollout_at(rollout, model, 1, seed=1)  # asked again: the same weights, reloaded
        assert again["completion_ids"] == rollout_at(rollout, model, 1, seed=1)["completion_ids"]
        assert engine_greedy()[1] == pytest.approx(before[1], abs=1e-4)
        rollout_at(rollout, model, 2, seed=1)  # step 2: synced
        tokens, logps = engine_greedy()
        assert tokens == after[0] and logps == pytest.approx(after[1], abs=1e-4)
        figures = [rollout.take_figures(s) for s in range(3)]
    finally:
        rollout.close()
    assert [f["rollout_staleness"] for f in figures] == [0, 1, 0]
    assert figures[0]["sync_s"] > 0 and figures[2]["sync_s"] > 0  # step 1's is the reload's


@needs_ct2
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and madvise are Linux's")
def test_the_frozen_weights_leave_memory_while_the_engine_generates(lora_model, monkeypatch):
    """The training model's frozen weights (memory-mapped from the model's file, never
    written) are out of the resident set when the engine generates, and read back unchanged."""
    from mleforge.policies.engines.ct2 import Ct2Engine
    from mleforge.utils.memory import file_mappings

    model, tokenizer = lora_model
    frozen = next(p for n, p in model.named_parameters() if "q_proj.base_layer" in n)
    pointer = frozen.untyped_storage().data_ptr()
    resident = lambda: next(m.rss for m in file_mappings() if m.start <= pointer < m.end)  # noqa: E731
    ids = Ct2Rollout(config(), tokenizer).encode(PROMPTS[0], None)
    before = greedy(model, tokenizer, ids)
    assert resident() > 0
    seen = []
    generate = Ct2Engine.generate
    monkeypatch.setattr(Ct2Engine, "generate", lambda self, *a, **k: seen.append(resident()) or generate(self, *a, **k))
    rollout = Ct2Rollout(config(), tokenizer)
    try:
        rollout_at(rollout, model, 0, seed=1)
    finally:
        rollout.close()
    assert seen == [0]
    assert greedy(model, tokenizer, ids) == before and resident() > 0


@needs_ct2
def test_int8_rollouts_return_their_logprobs(lora_model):
    model, tokenizer = lora_model
    rollout = Ct2Rollout(config(generation={"rollout_quantization": "int8"}), tokenizer)
    try:
        out = rollout_at(rollout, model, 0, seed=3)
    finally:
        rollout.close()
    assert out["logprobs"] is not None
    assert [len(x) for x in out["logprobs"]] == [len(c) for c in out["completion_ids"]]
    assert all(v <= 0 for row in out["logprobs"] for v in row)


@needs_ct2
def test_the_conversions_live_in_the_run_and_are_deleted_at_close(lora_model, tmp_path):
    """<run>/ct2-rollouts/rank-<i>: what a killed process left there goes at the first sync,
    and a closed rollout leaves no scratch folder behind (the parent goes with the last rank)."""
    model, tokenizer = lora_model
    run = tmp_path / "run"
    leftover = run / "ct2-rollouts" / "rank-0" / "mleforge-ct2-killed"
    leftover.mkdir(parents=True)
    (leftover / "model.bin").write_bytes(b"a killed process's conversion")
    other_rank = run / "ct2-rollouts" / "rank-1"
    other_rank.mkdir()
    trainer = trainer_at(model, 0)
    trainer.args = SimpleNamespace(output_dir=str(run / "checkpoints"))
    trainer.accelerator.process_index = 0
    rollout = Ct2Rollout(config(), tokenizer)
    try:
        torch.manual_seed(0)
        rollout(PROMPTS, trainer)
        (folder,) = (run / "ct2-rollouts" / "rank-0").iterdir()
        assert folder.name != leftover.name and (folder / "model.bin").is_file()
    finally:
        rollout.close()
    assert sorted(p.name for p in (run / "ct2-rollouts").iterdir()) == ["rank-1"]  # another rank's: kept
    other_rank.rmdir()
    rollout = Ct2Rollout(config(), tokenizer)
    try:
        rollout(PROMPTS, trainer)
    finally:
        rollout.close()
    assert sorted(p.name for p in run.iterdir()) == []  # the last rank takes ct2-rollouts/ with it
    rollout.close()  # twice: nothing left to do


# --- through mleforge train ---


def ct2_config(tiny, journals, **changes):
    from tests.train.test_grpo import REWARDS

    values = dict(
        model=ModelConfig(spec=f"hf:{tiny}", gradient_checkpointing=False), tasks="titanic", eval_tasks="",
        steps=2, group_size=4, groups_per_step=1, micro_batch=2, max_new_tokens=16, warm_start="none",
        journals=str(journals), sandbox={"executor": "local"}, generation={"backend": "ct2-sampled-test"},
        stepwise={"enabled": False}, lr=1e-2,
        reward=REWARDS, seed=3,
    )
    return TrainConfig(**{**values, **changes})


@needs_ct2
def test_grpo_steps_on_ct2_rollouts_train_the_adapter_and_log_the_sync(tiny, titanic, journals, tmp_path, registry):
    """Two real GRPO steps whose rollouts the ct2 engine samples (their tokens pick which real
    script each rollout becomes: tests/train/engines.py): the adapter moves, each step synced
    the engine, and a second run of the seed repeats every rollout."""
    from safetensors.torch import load_file

    from mleforge.train.recipe import train
    from tests.train.engines import short_prompt

    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        train(ct2_config(tiny, journals), run, registry=registry, progress=False, renderer=short_prompt)
    metrics = [json.loads(x) for x in (runs[0] / "metrics.jsonl").read_text().splitlines()]
    assert [m["rollout_staleness"] for m in metrics] == [0, 0]
    assert all(m["sync_s"] > 0 for m in metrics)
    lines = [[json.loads(x) for x in (run / "rollouts" / "step-1.jsonl").read_text().splitlines()] for run in runs]
    assert [x["completion"] for x in lines[0]] == [x["completion"] for x in lines[1]]
    weights = load_file(runs[0] / "final" / "adapter_model.safetensors")
    lora_b = [w for name, w in weights.items() if "lora_B" in name]
    assert lora_b and any(float(w.abs().max()) > 0 for w in lora_b)
    config = TrainConfig.from_dict(yaml.safe_load((runs[0] / "config.yaml").read_text()))
    assert (config.generation.backend, config.generation.rollout_quantization, config.generation.sync_every) == (
        "ct2-sampled-test", None, 1)


@needs_ct2
def test_a_killed_ct2_run_resumes_with_the_same_rollouts(tiny, titanic, journals, tmp_path):
    """The crash test of test_resume.py on ct2 rollouts: the resumed process builds its engine
    from the checkpoint's weights and samples what the uninterrupted run sampled."""
    from mleforge.train.records import VOLATILE_FIELDS
    from tests.train.crash import buffer_rows, finish, kill_after_step_one, lines, start

    config = ct2_config(tiny, journals, steps=3, group_size=2, groups_per_step=2, max_new_tokens=8, lr=5e-3,
                        sampler={"kind": "learnability"}, seed=5)
    first, straight, killed = kill_after_step_one(config.to_dict(), tmp_path)
    left = list((killed / "ct2-rollouts" / "rank-0").iterdir())
    assert len(left) == 1 and (left[0] / "model.bin").is_file()  # the killed process's conversion
    finish(start(killed, "--resume"), killed)
    finish(first, straight)
    assert not (killed / "ct2-rollouts").exists()  # deleted on resume; the last conversion, on close

    assert buffer_rows(killed) == buffer_rows(straight)
    assert lines(killed / "metrics.jsonl", VOLATILE_FIELDS) == lines(straight / "metrics.jsonl", VOLATILE_FIELDS)
    for step in range(3):
        name = f"rollouts/step-{step}.jsonl"
        assert lines(killed / name, ("cached",)) == lines(straight / name, ("cached",))
    outcomes = {x["outcome"] for s in range(3) for x in lines(straight / f"rollouts/step-{s}.jsonl", ())}
    assert len(outcomes) > 1  # the rollouts vary with the engine's samples
