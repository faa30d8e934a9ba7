"""Completion engines for the GRPO tests, plugged in where the CTranslate2 engine will be
(mleforge.train.grpo.generation): a tiny random model writes no runnable action, so these make
the trainer's completions real scripts while TRL's step (loss, advantages, optimizer) runs.

scripted:    the completions are COMPLETIONS in turn, the same every step.
sampled:     the model really samples (seeded by the trainer's step seed), and its sampled
             tokens pick which of COMPLETIONS the rollout becomes: the rollouts then depend on
             the weights and the RNG, as real ones do, which is what a resume must reproduce.
ct2-sampled: the same with the real ct2 rollout engine (mleforge.train.grpo.ct2_rollout) doing the
             sampling: its weight syncs, prompt layout and seeds are the ones under test.
"""

from __future__ import annotations

import torch

from mleforge.train.grpo.generation import register_engine
from tests.agent.scripted import COPY_SAMPLE, CRASH

ZEROS = '''Predict that nobody survived.
```python
import pandas as pd
sub = pd.read_csv("input/sample_submission.csv")
sub["Survived"] = 0
sub.to_csv("submission/submission.csv", index=False)
```'''
PROSE = "I would train a gradient boosting model."
COMPLETIONS = (COPY_SAMPLE, CRASH, ZEROS, PROSE)


def _ids(tokenizer, prompts, texts):
    prompt_ids = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)
                  ["input_ids"] for p in prompts]
    completion_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}


def scripted(config, tokenizer):
    def rollout(prompts, trainer):
        return _ids(tokenizer, prompts, [COMPLETIONS[i % len(COMPLETIONS)] for i in range(len(prompts))])

    return rollout


def sampled(config, tokenizer):
    def rollout(prompts, trainer):
        model = trainer.accelerator.unwrap_model(trainer.model)
        texts = []
        for prompt in prompts:
            ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)["input_ids"]
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                     max_new_tokens=4, top_k=0, pad_token_id=tokenizer.pad_token_id)
            texts.append(COMPLETIONS[int(out[0, ids.shape[1]:].sum()) % len(COMPLETIONS)])
        return _ids(tokenizer, prompts, texts)

    return rollout


def ct2_sampled(config, tokenizer):
    from mleforge.train.grpo.ct2_rollout import Ct2Rollout

    class Ct2Sampled(Ct2Rollout):
        def __call__(self, prompts, trainer):
            out = super().__call__(prompts, trainer)
            self.sampled = out["completion_ids"]  # what the engine drew, for the tests to read
            return _ids(tokenizer, prompts, [COMPLETIONS[sum(ids) % len(COMPLETIONS)] for ids in self.sampled])

    return Ct2Sampled(config, tokenizer)


register_engine("scripted-test", scripted, replace=True)
register_engine("sampled-test", sampled, replace=True)
register_engine("ct2-sampled-test", ct2_sampled, replace=True)


def short_prompt(state, task):
    """A renderer (mleforge.train.prompt_renderer.Renderer) of a few dozen tokens that still tells
    states apart: for tests whose subject is not the prompt (the real one is ~5,000 tokens
    of the tiny tokenizer, and the tiny model's attention over it dominates a step)."""
    target = state.target
    code = "" if target is None else target.code[-160:]
    return [{"role": "system", "content": "You write code."},
            {"role": "user", "content": f"{task.id} {state.stage} after {len(state.journal)} attempts\n{code}"}]
