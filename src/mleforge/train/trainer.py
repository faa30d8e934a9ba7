"""The GRPO trainer: TRL's GRPOTrainer, with its prompts from the curriculum and seeded steps.

Everything GRPO is TRL's: generation (or the engine behind `rollout_func`), the group
advantages (a None reward is NaN and left out), the loss, the optimizer, checkpoints.
This subclass changes one method. When TRL generates for a step it gets placeholder rows
(mleforge.train.feed); the subclass fills them with the step's states and prompts, and
seeds torch's RNG from (seed, step, rank) first, so a step's sampling, the shuffle of its
batch and anything else random in it depend only on the seed and the step, whether the run
went straight through or was resumed from a checkpoint. It also times the step's
generation and reward, and takes what a rollout engine reports of the step (its weight
sync's seconds, the staleness of the weights it sampled from); mleforge.train.feedback
turns them into metrics.

One more, for devices without Triton (a CPU): TRL 1.16's fused LM head projects only the
completion positions through the vocabulary where Triton runs, and every position
elsewhere (so that tile shapes stay fixed). A CPU step's sequence is a ~1,400-token prompt
and a <=192-token completion, so the head did 8x the work needed: 30% of the update's time
under py-spy in a main-job step. There, `_get_per_token_logps_and_entropies` asks the
model's own forward for the last `logits_to_keep + 1` positions' logits and takes the same
log-probabilities and entropies from them with TRL's `selective_log_softmax_and_entropy`
(equal to the fused head's to float precision: tests/train/test_trainer_logps.py). The loss,
advantages and everything after are TRL's, unchanged.

Imports TRL: use it only where the `train` extra is installed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import selective_log_softmax_and_entropy

from mleforge.policies.base import derive_seed
from mleforge.train.feed import CurriculumFeed
from mleforge.train.generation import rollout_figures

# Logits one call of the model may hold on the device-without-Triton path (float32: 1 GiB);
# a larger chunk of sequences is split into smaller ones.
MAX_LOGITS = 1 << 28


def compact_head_native(device: Any) -> bool:
    """Whether TRL's fused LM head scores only the completion positions on `device` (where Triton
    runs: CUDA and XPU)."""
    try:
        from trl.kernels.chunked_logprob import _use_triton
    except ImportError:  # another TRL: its own method decides
        return True
    return bool(_use_triton(device))


def step_seed(seed: int, step: int, rank: int) -> int:
    """The seed of one rank's step: different ranks sample different completions."""
    return derive_seed(seed, step, rank)  # type: ignore[return-value]


class CurriculumGRPOTrainer(GRPOTrainer):
    def __init__(self, *args: Any, feed: CurriculumFeed, run_seed: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.feed = feed
        self.run_seed = run_seed
        self.timings: dict[int, dict[str, float]] = defaultdict(dict)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        step = self.state.global_step
        started = time.perf_counter()
        rows = self.feed.rows(step, inputs)
        seed = step_seed(self.run_seed, step, self.accelerator.process_index)
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
        drawn = time.perf_counter()
        output = super()._generate_and_score_completions(rows)
        self.timings[step].update(feed_s=drawn - started, generate_and_reward_s=time.perf_counter() - drawn,
                                  **rollout_figures(self.rollout_func, step))
        return output

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int,
                                           batch_size: int | None = None, compute_entropy: bool = False,
                                           **kwargs: Any) -> Any:
        extra = {k: v for k, v in kwargs.items() if v is not None and v is not False}
        if extra or compact_head_native(input_ids.device):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, **kwargs)
        return completion_logps(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                                compute_entropy=compute_entropy, temperature=self.temperature,
                                entropy_requires_grad=getattr(self, "_entropy_bonus_enabled", True))


def completion_logps(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *, batch_size: int | None,
                     compute_entropy: bool, temperature: float, entropy_requires_grad: bool) -> tuple[Any, Any, None]:
    """The log-probability (and entropy) of each of the last `logits_to_keep` tokens, as TRL's fused
    head gives them (0 at padding), with the vocabulary projection on those positions only."""
    rows = input_ids.size(0)
    vocab = model.get_output_embeddings().weight.size(0)
    chunk = max(1, min(batch_size or rows, MAX_LOGITS // max(1, (logits_to_keep + 1) * vocab)))
    logps, entropies = [], []
    for start in range(0, rows, chunk):
        ids, mask = input_ids[start:start + chunk], attention_mask[start:start + chunk]
        # The last logits_to_keep + 1 positions: position t predicts token t + 1, the last predicts nothing.
        logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1,
                       use_cache=False).logits[:, :-1]
        keep = mask[:, -logits_to_keep:]
        lp, ent = selective_log_softmax_and_entropy(logits.float(), ids[:, -logits_to_keep:],
                                                    entropy_requires_grad=entropy_requires_grad,
                                                    temperature=temperature, row_mask=keep)
        logps.append(lp.masked_fill(keep == 0, 0.0))
        entropies.append(ent)
    return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None
