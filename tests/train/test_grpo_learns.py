"""GRPO learns: the project's trainer (CurriculumGRPOTrainer with the cpu preset's completion-only
log-probabilities, TRL's GRPOConfig from `grpo_args`, ct2 rollouts synced after every step) moves
a policy the way its reward asks, not at all at lr 0, and not systematically when the reward says
nothing about the behaviour.

The policy is tests/train/tiny_model.py's warm-started tiny Qwen2: it writes a few words and ends
after a varied number of tokens. The behaviour under test is its completion length, measured as
`shortness` (1 - tokens before the end / MAX_NEW_TOKENS: 0 for a completion cut at the cap). The
runs use the cpu preset's GRPO settings (dapo loss, scale_rewards group, beta 0, constant lr,
temperature 0.8, prompt_grad off, a group per micro-batch) with a batch of GROUPS x GROUP rollouts,
LR and STEPS; every number asserted below is a margin under what these runs measured over more
seeds than the tests use (docs/guide/grpo-learns.md lists them, and the command that measures them).

The prompts come from `Prompts` instead of the curriculum's CurriculumFeed: the buffer, sampler
and sandbox behind that feed are not what these tests are about (tests/train/test_grpo.py runs
the whole recipe); the trainer takes the rows exactly as it takes the feed's.
"""

from __future__ import annotations

import importlib.util
import random
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

pytest.importorskip("trl")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("ctranslate2") is None,
                                                   reason="ctranslate2 is not installed (pip install 'mleforge[fast]')")]

MAX_NEW_TOKENS = 16
GROUP = 8
GROUPS = 2  # two groups a step: the step's micro-batches are re-split one prompt each (regroup_by_prompt)
LR = 1e-3
STEPS = 30
WINDOW = 5  # steps averaged at each end of a run
SEEDS = (0, 1, 2)
QUESTIONS = ("add two numbers", "import numpy", "train the model", "write a submission")


class Prompts:
    """TRL's placeholder rows filled as CurriculumFeed.rows fills them: slot i of step t gets
    question (2t + i) mod 4."""

    def rows(self, step: int, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"prompt": [{"role": "system", "content": "You write code."},
                            {"role": "user", "content": QUESTIONS[(GROUPS * step + int(r["group"])) % len(QUESTIONS)]}],
                 "state_id": "", "group": r["group"]} for r in inputs]


@dataclass
class Run:
    """A training run's record: each step's mean shortness and its rollouts (step, prompts, ids)."""

    trainer: Any = field(repr=False)
    engine: Any = field(default=None, repr=False)  # the rollout engine (None: TRL's own generation)
    shortness: list[float] = field(default_factory=list)
    rollouts: list[tuple[int, list, list[list[int]]]] = field(default_factory=list, repr=False)

    def change(self) -> float:
        """Mean shortness of the last WINDOW steps less that of the first WINDOW."""
        return mean(self.shortness[-WINDOW:]) - mean(self.shortness[:WINDOW])


def shortness(ids: list[int], eos: int) -> float:
    return 1.0 - sum(1 for i in ids if i != eos) / MAX_NEW_TOKENS


def make_reward(kind: str, seed: int, eos: int, run: Run):
    """TRL's reward function: shortness ("short"), its negation ("long"), or shortness shuffled
    among the rollouts of each group by a seeded RNG ("null": a reward that says nothing about
    the rollout it is given, with each group's values, so each group's advantages, kept)."""
    shuffler = random.Random(seed)

    def reward(prompts, completions, completion_ids, group, **kwargs):
        values = [shortness(ids, eos) for ids in completion_ids]
        run.shortness.append(mean(values))
        if kind == "long":
            return [-v for v in values]
        if kind == "null":
            for g in set(group):
                rows = [i for i, x in enumerate(group) if x == g]
                drawn = [values[i] for i in rows]
                shuffler.shuffle(drawn)
                for i, v in zip(rows, drawn):
                    values[i] = v
        return values

    reward.__name__ = f"shortness_{kind}"
    return reward


def build(folder: Path, out: Path, kind: str, seed: int, *, lr: float = LR, steps: int = STEPS,
          backend: str = "ct2") -> Run:
    """The project's trainer on the tiny model, as mleforge.train.grpo.training.build_trainer
    builds it (its GRPOConfig from `grpo_args`, its rollout engine from `rollout_func_for`,
    the model from `load_for_training`), with the reward of `make_reward` and no checkpoints."""
    import transformers
    from datasets import Dataset

    from mleforge.train.config import ModelConfig, TrainConfig
    from mleforge.train.grpo.generation import rollout_func_for
    from mleforge.train.grpo.state_feed import placeholder_rows
    from mleforge.train.grpo.trainer import CurriculumGRPOTrainer
    from mleforge.train.grpo.training import grpo_args
    from mleforge.train.model import load_for_training
    from mleforge.train.plan import Plan

    config = TrainConfig(model=ModelConfig(spec=f"hf:{folder}", threads=1), steps=steps, group_size=GROUP,
                         groups_per_step=GROUPS, max_new_tokens=MAX_NEW_TOKENS, lr=lr or LR, seed=seed,
                         generation={"backend": backend}, warm_start="none", eval_tasks="")
    loaded = load_for_training(config.model)
    loaded.tokenizer.padding_side = "left"
    args = grpo_args(Plan(config, (), (), loaded.source, "cpu", 1), out, "cpu")
    if lr == 0:  # TrainConfig refuses 0; TRL's optimizer takes it
        args.learning_rate = 0.0
    args.save_strategy = "no"
    engine = rollout_func_for(backend, config, loaded.tokenizer)
    run = Run(trainer=None)

    def recording(prompts, trainer):  # the engine's rollouts, as TRL gets them
        made = engine(prompts, trainer)
        run.rollouts.append((trainer.state.global_step, prompts, made["completion_ids"]))
        return made

    run.trainer = CurriculumGRPOTrainer(
        model=loaded.model, reward_funcs=[make_reward(kind, seed, loaded.tokenizer.eos_token_id, run)], args=args,
        train_dataset=Dataset.from_list(placeholder_rows(GROUPS)), processing_class=loaded.tokenizer,
        peft_config=loaded.peft_config, rollout_func=recording if engine else None, feed=Prompts(),
        run_seed=seed, prompt_grad=config.model.prompt_grad)
    run.trainer.remove_callback(transformers.PrinterCallback)
    run.engine = engine
    return run


def train(folder: Path, out: Path, kind: str, seed: int, **options: Any) -> Run:
    """A run built by `build`, trained and closed; torch's thread count as it was."""
    import torch

    from mleforge.train.grpo.generation import close_rollout

    threads = torch.get_num_threads()
    run = build(folder, out, kind, seed, **options)
    try:
        run.trainer.train()
    finally:
        close_rollout(run.engine)
        torch.set_num_threads(threads)
    logged = [entry["reward"] for entry in run.trainer.state.log_history if "reward" in entry]
    sign = -1.0 if kind == "long" else 1.0
    assert [sign * x for x in logged] == pytest.approx(run.shortness, abs=1e-6)  # TRL's own log agrees
    return run


@pytest.fixture(scope="module")
def runs(learner, tmp_path_factory):
    """The module's runs, trained on first use and kept: {(kind, seed, backend): Run}."""
    cache: dict[tuple[str, int, str], Run] = {}

    def get(kind: str, seed: int, backend: str = "ct2") -> Run:
        key = (kind, seed, backend)
        if key not in cache:
            cache[key] = train(learner, tmp_path_factory.mktemp(f"{kind}-{seed}-{backend}") / "run", kind, seed,
                               backend=backend)
        return cache[key]

    return get


@pytest.mark.parametrize("seed", SEEDS)
def test_the_training_reward_rises_and_the_negated_reward_makes_it_fall(runs, seed):
    """Trained on shortness, the completions get shorter; trained on its negation, longer. The
    warm start's first windows are 0.31-0.52 (room both ways). Measured over seeds 0-7: changes
    +0.40 to +0.50 (last windows 0.82-0.94) and -0.29 to -0.39 (last windows 0.00-0.03)."""
    short, long = runs("short", seed), runs("long", seed)
    assert short.shortness[:1] == long.shortness[:1]  # step 0: the same warm start, the same seed
    assert 0.2 < mean(short.shortness[:WINDOW]) < 0.6 and 0.2 < mean(long.shortness[:WINDOW]) < 0.6
    assert short.change() > 0.25 and mean(short.shortness[-WINDOW:]) > 0.7
    assert long.change() < -0.2 and mean(long.shortness[-WINDOW:]) < 0.1


def test_transformers_generation_learns_the_same_way(runs):
    """generation trl (TRL's own generate on the training model, where ctranslate2 is not
    installed): the same reward moves the same behaviour (seeds 0-7: +0.40 to +0.55, last
    windows 0.85-0.92)."""
    short = runs("short", 0, "trl")
    assert not short.rollouts  # no engine: TRL generated
    assert short.change() > 0.25 and mean(short.shortness[-WINDOW:]) > 0.7


def test_shuffled_rewards_move_nothing_systematic(runs):
    """The null control: each group keeps its rewards, shuffled among its rollouts, so the
    advantages have the true run's sizes and say nothing about the rollout they are given; the
    expected update is zero and only a random walk is left.

    Asserted on SEEDS: (1) with the true reward the same seeds move shortness by more than 0.25,
    so that a trainer that learns nothing cannot pass; (2) each seed's null change stays within
    0.2 and (3) their mean within 0.1. Measured over seeds 0-7: null changes -0.08 to +0.09
    (mean -0.02; with the advantages' sign flipped, the same null in law, -0.11 to +0.18),
    against +0.40 to +0.50 with the true reward. The runs are deterministic, so the outcome is
    no draw; what the bounds rule out is a systematic push of half the true reward's size or
    more (a loss biased toward short or long completions, rewards reaching the wrong rollouts):
    it would move every seed the same way, past (3)."""
    for seed in SEEDS:
        assert runs("short", seed).change() > 0.25
    changes = [runs("null", seed).change() for seed in SEEDS]
    assert all(abs(c) < 0.2 for c in changes) and abs(mean(changes)) < 0.1, changes


def test_at_lr_0_the_policy_stays_its_warm_start_token_for_token(learner, tmp_path):
    """lr 0: every weight (the base's and a non-zero adapter's: a LoRA merge for the engine that
    stayed in the weights would show) is bit-identical after training, the engine synced after
    the last step samples step 0's rollouts again at step 0's seed, and transformers' sampling
    at one seed gives the same tokens before and after."""
    import torch

    from mleforge.train.grpo.generation import close_rollout
    from mleforge.train.grpo.trainer import step_seed

    steps, seed = 4, 5
    run = build(learner, tmp_path / "run", "short", seed, lr=0.0, steps=steps)
    model = run.trainer.model
    torch.manual_seed(0)
    with torch.no_grad():  # an adapter that changes the outputs, so that a stale merge would show
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    weights = {name: param.detach().clone() for name, param in model.named_parameters()}
    before = sample(model, run.trainer.processing_class)
    threads = torch.get_num_threads()
    try:
        run.trainer.train()
        assert {name: torch.equal(weights[name], param) for name, param in model.named_parameters()} == \
            dict.fromkeys(weights, True)
        assert sample(model, run.trainer.processing_class) == before
        step, prompts, first = run.rollouts[0]
        torch.manual_seed(step_seed(seed, step, 0))  # as the trainer seeds step 0
        again = run.engine(prompts, run.trainer)["completion_ids"]
    finally:
        close_rollout(run.engine)
        torch.set_num_threads(threads)
    assert [s for s, _, _ in run.rollouts] == list(range(steps)) and run.trainer.state.global_step == steps
    assert again == first
    assert len(set(run.shortness)) > 1 and run.trainer.state.log_history[-1]["train_loss"] is not None


def sample(model, tokenizer) -> list[list[int]]:
    """transformers' sampling of the model at a fixed seed (a question, 8 completions)."""
    import torch

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTIONS[0]}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)["input_ids"]
    torch.manual_seed(11)
    with torch.no_grad():
        out = model.generate(input_ids=prompt.repeat(8, 1), attention_mask=torch.ones(8, prompt.size(1), dtype=int),
                             do_sample=True, temperature=0.8, top_k=0, max_new_tokens=MAX_NEW_TOKENS,
                             pad_token_id=tokenizer.pad_token_id)
    return out[:, prompt.size(1):].tolist()


def measure(seeds: list[int]) -> None:
    """The margins' measurements: each seed's change (last WINDOW steps' mean shortness less the
    first WINDOW's) per reward, and the final window's mean (python -m tests.train.test_grpo_learns 0 1 2 ...)."""
    import tempfile

    from tests.train.tiny_model import build_learner

    with tempfile.TemporaryDirectory() as temp:
        folder = build_learner(Path(temp) / "learner")
        print("kind   backend seed  first   last   change")
        for kind, backend in (("short", "ct2"), ("long", "ct2"), ("null", "ct2"), ("short", "trl")):
            for seed in seeds:
                run = train(folder, Path(temp) / f"{kind}-{backend}-{seed}" / "run", kind, seed, backend=backend)
                print(f"{kind:6} {backend:7} {seed:4}  {mean(run.shortness[:WINDOW]):.3f}  "
                      f"{mean(run.shortness[-WINDOW:]):.3f}  {run.change():+.3f}", flush=True)


if __name__ == "__main__":
    import sys

    measure([int(x) for x in sys.argv[1:]] or list(range(8)))
