"""The verl backend on a CPU, against verl's own code (0.9.1): its reward manager calls our
compute_score, its dataset loader and collate read the curriculum and the exported parquet,
its Hydra schema and validate_config accept the example configs. Real executions, a real
Ray actor; only the training itself needs GPUs (docs/guide/verl.md)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl is not installed: pip install -e '.[verl]' && pip install --no-deps verl==0.9.1")
torch = pytest.importorskip("torch")

from omegaconf import OmegaConf  # noqa: E402

from mleforge.curriculum.buffer import StateBuffer  # noqa: E402
from mleforge.reward import RewardConfig  # noqa: E402
from mleforge.train.config import TrainConfig  # noqa: E402
from mleforge.train.verl import reward as verl_reward  # noqa: E402
from mleforge.train.verl.owner import LOG_FILE, BufferOwner  # noqa: E402
from mleforge.train.verl.run import prepare_run  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verl"
SAMPLE = ("Submit the sample.\n```python\nimport pandas as pd\n"
          "pd.read_csv('input/sample_submission.csv').to_csv('submission/submission.csv', index=False)\n```")
CRASH = "Crash.\n```python\nraise SystemExit(3)\n```"


@pytest.fixture(scope="module")
def run(registry, tmp_path_factory):
    config = TrainConfig(tasks="titanic", eval_tasks="", steps=2, group_size=2, groups_per_step=2,
                         warm_start="none", sandbox={"executor": "local"})
    return prepare_run(config, tmp_path_factory.mktemp("verl") / "run", registry)


@pytest.fixture(scope="module")
def tokenizer():
    """A real byte-level tokenizer (every byte one token), built here: no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def reward_manager(tokenizer):
    """verl's own loader of the custom reward function, and its naive reward manager."""
    from verl.trainer.ppo.reward import load_reward_manager

    config = OmegaConf.create({"reward": {
        "custom_reward_function": {"path": "pkg://mleforge.train.verl.reward", "name": "compute_score"},
        "reward_manager": {"source": "register", "name": "naive"}}})
    return load_reward_manager(config, tokenizer)


def data_item(tokenizer, row, completion):
    """One rollout as verl's agent loop hands it to the reward manager."""
    from verl import DataProto

    ids = torch.tensor([tokenizer.encode(completion)])
    prompts = torch.zeros((1, 3), dtype=torch.long)
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": ids, "attention_mask": torch.ones((1, 3 + ids.shape[1]), dtype=torch.long)},
        non_tensors={k: np.array([row[k]], dtype=object) for k in ("data_source", "reward_model", "extra_info")},
    )


def score_with_verl(tokenizer, row, completions):
    async def go():
        manager = reward_manager(tokenizer)  # in the loop: verl keeps the loop it was made in
        return [await manager.run_single(data_item(tokenizer, row, c)) for c in completions]

    return asyncio.run(go())


def test_verl_reward_manager_scores_through_mleforge(run, tokenizer):
    row = BufferOwner(str(run.folder), name="").next_row()
    assert "owner" not in row["extra_info"]
    valid, no_code, crash = score_with_verl(tokenizer, row, [SAMPLE, "no code at all", CRASH])
    # The sample submission on a draft state scores the baseline: delta 0, sigmoid 0.5.
    assert valid["reward_score"] == 0.5 and valid["reward_extra_info"]["valid"] == 1.0
    assert no_code["reward_score"] == RewardConfig().r_format and no_code["reward_extra_info"]["format_error"] == 1.0
    assert crash["reward_score"] == RewardConfig().r_fail and crash["reward_extra_info"]["execution_error"] == 1.0
    for result in (valid, no_code, crash):  # verl builds one array per key of the first result
        assert tuple(result["reward_extra_info"]) == verl_reward.KEYS
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

    data = data_item(tokenizer, row, SAMPLE)
    rm = RewardManagerBase.assemble_rm_scores(data, [valid["reward_score"]])
    assert rm[0, -1].item() == 0.5 and rm.sum().item() == 0.5


class BrokenExecutor:
    """An executor that breaks as infrastructure (an OSError of its own)."""

    def run(self, script, task, limits=None, **kw):
        raise PermissionError(13, "Permission denied", "/tmp/mleforge-ws")

    def close(self):
        pass


def test_a_lost_rollout_raises_out_of_verl_instead_of_scoring(run, tokenizer):
    row = BufferOwner(str(run.folder), name="").next_row()
    key = str(run.folder)
    good = verl_reward.scorer_for(key)
    verl_reward._scorers[key] = verl_reward.Scorer(run, executor=BrokenExecutor(), workers=1)
    try:
        with pytest.raises(verl_reward.RolloutLost, match="PermissionError"):
            score_with_verl(tokenizer, row, [SAMPLE])
    finally:
        verl_reward._scorers[key] = good


SCORE_TWICE = """
import asyncio, json, sys
from mleforge.train.verl.reward import compute_score
row = json.loads(sys.argv[1])
print(json.dumps([asyncio.run(compute_score("mleforge", sys.argv[2], row["reward_model"]["ground_truth"],
                                            row["extra_info"]))["cached"] for _ in range(2)]))
"""


def test_a_processs_scorer_is_closed_when_it_exits(run, tmp_path):
    """verl's reward worker scores until it exits: its scorer's sandbox session and the folder
    of its cache hits (what the second, cached, run was read back into) go when it does."""
    row = BufferOwner(str(run.folder), name="").next_row()
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(Path(verl_reward.__file__).parents[3])}
    env.pop("MLEFORGE_SANDBOX_DIR", None)
    done = subprocess.run([sys.executable, "-c", SCORE_TWICE, json.dumps(row), SAMPLE], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)[1] == 1.0  # the second run: a hit of the result cache
    assert list(temp.glob("mleforge-cache-hits-*")) == []
    assert [p for p in temp.glob("mleforge-ws-*/*") if p.is_dir()] == []  # no sandbox session left


def test_a_row_of_another_source_or_edited_is_refused(run):
    row = BufferOwner(str(run.folder), name="").next_row()
    with pytest.raises(Exception, match="data_source"):
        asyncio.run(verl_reward.compute_score("gsm8k", SAMPLE, "42", row["extra_info"]))
    with pytest.raises(Exception, match="must not be edited"):
        asyncio.run(verl_reward.compute_score("mleforge", SAMPLE, "0" * 64, row["extra_info"]))


def data_config(**overrides):
    import verl

    base = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/data/legacy_data.yaml")
    base.custom_cls = {"path": "pkg://mleforge.train.verl.dataset", "name": "CurriculumDataset"}
    return OmegaConf.merge(base, {"train_batch_size": 2, "dataloader_num_workers": 0, "shuffle": False,
                                  "cache_dir": "/tmp/verl-cache-unused", **overrides})


@pytest.fixture(scope="module")
def ray_cluster(run):
    """A local Ray cluster; one another test module started is used as it is."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started:
        ray.shutdown()


def test_the_dataset_refuses_settings_that_break_the_rounds(run, tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    with pytest.raises(Exception, match="train_batch_size is 3"):
        create_rl_dataset(str(run.folder), data_config(train_batch_size=3), tokenizer, None)
    with pytest.raises(Exception, match="dataloader_num_workers must be 0"):
        create_rl_dataset(str(run.folder), data_config(dataloader_num_workers=2), tokenizer, None)


def test_a_run_directory_is_prepared_once_for_one_config(run, registry):
    from dataclasses import replace

    assert prepare_run(run.config, run.folder, registry).config == run.config  # again: loaded as it is
    with pytest.raises(Exception, match="prepared with another config"):
        prepare_run(replace(run.config, steps=3), run.folder, registry)


def test_the_curriculum_feeds_verls_loader_and_takes_back_the_rewards(run, tokenizer, ray_cluster):
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    config = data_config()
    dataset = create_rl_dataset(str(run.folder), config, tokenizer, None)
    assert type(dataset).__name__ == "CurriculumDataset" and len(dataset) == 2 * 2  # steps x groups
    loader = StatefulDataLoader(dataset=dataset, batch_size=2, num_workers=0, drop_last=True,
                                collate_fn=collate_fn, sampler=create_rl_sampler(config, dataset))
    batches = iter(loader)
    first = next(batches)
    with StateBuffer(run.folder, create=False) as buffer:
        seeds = {r["state_id"] for r in buffer.rows()}
    assert first["raw_prompt"].shape == (2,) and first["dummy_tensor"].shape == (2, 1)
    assert {e["state_id"] for e in first["extra_info"]} <= seeds
    assert first["raw_prompt"][0] == first["prompt"][0] and first["raw_prompt"][0][-1]["role"] == "user"

    async def score_all():  # as verl's reward workers do, reporting to the owner actor
        return [await verl_reward.compute_score(first["data_source"][i], SAMPLE, first["reward_model"][i]["ground_truth"],
                                                first["extra_info"][i]) for i in range(2)]

    assert [r["score"] for r in asyncio.run(score_all())] == [0.5, 0.5]
    next(batches)  # the next round's first fetch seals step 0 with the two reports
    line = json.loads((run.folder / LOG_FILE).read_text().splitlines()[0])
    assert line["step"] == 0 and line["applied"] and line["rollouts"] == 2 and line["valid"] == 2
    assert line["mean_reward"] == 0.5 and line["new_states"] >= 1
    with StateBuffer(run.folder, create=False) as buffer:
        assert buffer.sealed_step == 0 and buffer.counts()["live_states"] == len(seeds) + line["new_states"]


def test_the_verl_export_is_read_by_verls_own_dataset(run, tokenizer, tmp_path):
    from verl.trainer.ppo.utils import create_rl_dataset

    from mleforge.cli.main import main

    out = tmp_path / "states.parquet"
    assert main(["buffer", "export", str(run.folder), "--format", "verl", "--out", str(out)]) == 0
    dataset = create_rl_dataset(str(out), data_config(cache_dir=str(tmp_path / "cache")), tokenizer, None)
    with StateBuffer(run.folder, create=False) as buffer:
        assert len(dataset) == buffer.counts()["live_states"]
    item = dataset[0]
    assert item["data_source"] == "mleforge" and item["ability"] == "mle"
    assert item["reward_model"] == {"ground_truth": item["extra_info"]["state_id"], "style": "execution"}
    assert item["raw_prompt"][-1]["role"] == "user" and "titanic" in item["extra_info"]["task_id"]
    result = asyncio.run(verl_reward.compute_score(item["data_source"], SAMPLE, item["reward_model"]["ground_truth"],
                                                   item["extra_info"]))
    assert result["valid"] == 1.0


@pytest.mark.parametrize("name", ["mleforge_grpo_1node", "mleforge_grpo_multinode"])
def test_the_example_configs_pass_verls_schema(name, monkeypatch, tmp_path):
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    monkeypatch.setenv("MLEFORGE_RUN", str(tmp_path))
    with initialize_config_dir(config_dir=str(EXAMPLES / "config"), version_base=None):
        config = compose(config_name=name)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    assert omega_conf_to_dataclass(config.algorithm).adv_estimator == "grpo"
    assert omega_conf_to_dataclass(config.actor_rollout_ref.rollout).n == 8
    assert config.data.custom_cls.path == "pkg://mleforge.train.verl.dataset"
    assert config.reward.custom_reward_function.path == "pkg://mleforge.train.verl.reward"
    mleforge_yaml = "mleforge.yaml" if name.endswith("1node") else "mleforge_multinode.yaml"
    ours = TrainConfig.from_dict(OmegaConf.to_container(OmegaConf.load(EXAMPLES / mleforge_yaml)))
    assert (ours.groups_per_step, ours.group_size) == (config.data.train_batch_size, config.actor_rollout_ref.rollout.n)


def test_a_round_is_sealed_once_all_its_rollouts_are_in(registry, tmp_path):
    """The last round of a run has no next round to fetch: it is sealed by its last report
    (groups x group_size), not lost; a round missing a report waits for the next fetch."""
    from mleforge.train.verl.owner import RolloutReport

    config = TrainConfig(tasks="titanic", eval_tasks="", steps=2, group_size=2, groups_per_step=2,
                         warm_start="none", sandbox={"executor": "local"})
    fresh = prepare_run(config, tmp_path / "run", registry)
    owner = BufferOwner(str(fresh.folder), name="")
    scorer = verl_reward.Scorer(fresh, workers=1)
    try:
        rows = [owner.next_row() for _ in range(2)]
        states = [verl_reward.state_of(r["extra_info"], r["reward_model"]["ground_truth"]) for r in rows]
        reports = []
        for state, row in zip(states, rows, strict=True):
            for completion in (SAMPLE, CRASH):
                outcome = scorer.score(state, completion, f"v{row['extra_info']['index']}")
                reports.append(RolloutReport(state, completion, outcome.result, outcome.reward, outcome.node.id,
                                             outcome.node.error))
        for report in reports[:3]:
            owner.report(report)
        assert owner.buffer.sealed_step == -1 and not (fresh.folder / LOG_FILE).exists()  # one rollout short
        owner.report(reports[3])
        assert owner.buffer.sealed_step == 0 and owner.stats()["round_step"] is None
        line = json.loads((fresh.folder / LOG_FILE).read_text())
        assert (line["step"], line["rollouts"], line["valid"]) == (0, 4, 2)
        assert owner.next_row()["extra_info"]["index"] == 2  # the next round, drawn after step 0's feedback
        assert owner.stats()["round_step"] == 1
    finally:
        scorer.close()
        owner.close()
