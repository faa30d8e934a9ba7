"""The GRPO trainer: TRL's GRPOTrainer, with its prompts from the curriculum and seeded steps.

Everything GRPO is TRL's: generation (or the engine behind `rollout_func`), the group
advantages (a None reward is NaN and left out), the loss, the optimizer, checkpoints.
This subclass changes one method. When TRL generates for a step it gets placeholder rows
(mleforge.train.grpo.state_feed); the subclass fills them with the step's states and prompts, and
seeds torch's RNG from (seed, step, rank) first, so a step's sampling, the shuffle of its
batch and anything else random in it depend only on the seed and the step, whether the run
went straight through or was resumed from a checkpoint. It also times the step's
generation and reward, and takes what a rollout engine reports of the step (its weight
sync's seconds, the staleness of the weights it sampled from); mleforge.train.grpo.buffer_callback
turns them into metrics. And it treats the groups of a step that have no valid rollout as
TrainConfig.invalid_groups says (mleforge.train.grpo.advantages; "standardize" leaves TRL's
advantages as they are), and for the null control (TrainConfig.shuffle_rewards) permutes each
group's rewards before TRL turns them into advantages.

One more, for devices without Triton (a CPU): TRL 1.16's fused LM head projects only the
completion positions through the vocabulary where Triton runs, and every position
elsewhere (so that tile shapes stay fixed). A CPU step's sequence is a long prompt and a
short completion, so the head did several times the work needed (`python benchmarks/lm_head.py`
measures it). There, `_get_per_token_logps_and_entropies` takes the decoder's hidden states
at the last `logits_to_keep + 1` positions only and projects them through the head with TRL's
chunked kernel, a tile of the vocabulary at a time (mleforge.train.grpo.chunked_head), so that a
micro-batch's logits, [rows, positions, vocabulary] floats, are never held whole for the backward
pass; and the attention takes the keys and values per key/value head (mleforge.train.grpo.kv_heads)
rather than copied out to every query head, and a gated SiLU MLP keeps its gate and up projections,
not also their SiLU, for the backward pass (mleforge.train.grpo.gated_mlp). The log-probabilities
and entropies equal the fused head's to float precision (tests/train/test_trainer_logps.py,
test_chunked_head.py, test_gated_mlp.py); the update's peak memory and time are
`python benchmarks/memory.py --phases grpo_step,grpo_step_paired`'s.
After each update the C heap's freed pages go back to the system (mleforge.utils.memory). The
loss, advantages and everything after are TRL's, unchanged.

On that path the rows of one call that share a prompt (a GRPO group) run it through the model
once: the prompt's forward keeps its graph and its key/value cache is gathered out to the rows,
whose completions attend to it (`completion_logps`' share_prompts). The cpu preset's
micro-batch is one group, and `_prepare_inputs` re-splits TRL's shuffled step so that each
micro-batch holds one prompt's rows, which makes a group's update several times cheaper than
one sequence at a time (`python benchmarks/lm_head.py --group 4`).
With ModelConfig.prompt_grad off (the cpu preset's) the prompt but its last token runs without a
graph (`_detached_prompt_forward`), so the backward pass covers the completions only. Where Triton
runs (a GPU), and wherever several processes train (DDP's wrapper syncs gradients on one forward
through it), TRL's own path runs as it is, with the exact gradient, whatever prompt_grad says.

Imports TRL: use it only where the `train` extra is installed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import nullcontext
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import selective_log_softmax_and_entropy

from mleforge.policies.base import derive_seed
from mleforge.train.grpo.advantages import (
    group_permutation,
    invalid_groups_of,
    treat_invalid_groups,
)
from mleforge.train.grpo.chunked_head import head_logps, split_head
from mleforge.train.grpo.gated_mlp import lean_gated_mlp
from mleforge.train.grpo.generation import rollout_figures
from mleforge.train.grpo.kv_heads import grouped_kv_on_cpu
from mleforge.train.grpo.state_feed import CurriculumFeed
from mleforge.utils.memory import release_memory

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
    def __init__(self, *args: Any, feed: CurriculumFeed, run_seed: int, prompt_grad: bool = True,
                 invalid_groups: str = "standardize", valid_from: float | None = None,
                 shuffle_rewards: bool = False, **kwargs: Any):
        """invalid_groups: TrainConfig.invalid_groups; valid_from: the lowest reward of a valid
        rollout (RewardConfig.lowest_valid_reward; None: every group counts as valid);
        shuffle_rewards: TrainConfig.shuffle_rewards (the null control)."""
        super().__init__(*args, **kwargs)
        self.feed = feed
        self.run_seed = run_seed
        self.prompt_grad = prompt_grad
        self.invalid_groups = invalid_groups
        self.shuffle_rewards = shuffle_rewards
        self.valid_from = valid_from
        self.timings: dict[int, dict[str, float]] = defaultdict(dict)
        self._step_rewards: Any = None  # the step's rewards of every process, as TRL gathered them

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        step = self.state.global_step
        started = time.perf_counter()
        rows = self.feed.rows(step, inputs)
        seed = step_seed(self.run_seed, step, self.accelerator.process_index)
        torch.manual_seed(seed)
        if torch.cuda.is_available():
            torch.cuda.manual_seed_all(seed)
        drawn = time.perf_counter()
        self._step_rewards = None
        output = super()._generate_and_score_completions(rows)
        self.timings[step].update(feed_s=drawn - started, generate_and_reward_s=time.perf_counter() - drawn,
                                  **rollout_figures(self.rollout_func, step))
        return self._treat_invalid_groups(output, len(rows))

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.shuffle_rewards and self.model.training:  # the null control: the same on every process
            seed = derive_seed(self.run_seed, self.state.global_step, -1)  # not a rank's step seed
            order = group_permutation(rewards_per_func.size(0), self.num_generations, seed)  # type: ignore[arg-type]
            rewards_per_func = rewards_per_func[torch.tensor(order, device=rewards_per_func.device)]
        self._step_rewards = rewards_per_func  # (every process's rows, reward functions)
        return rewards_per_func

    def _treat_invalid_groups(self, output: dict[str, Any], local_rows: int) -> dict[str, Any]:
        """TRL's advantages with the groups that have no valid rollout treated by `invalid_groups`;
        the fraction of such groups is logged (frac_groups_no_valid) whatever the setting."""
        per_func = self._step_rewards
        if per_func is None or self.valid_from is None or not self.model.training:
            return output
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        rewards = (per_func * weights).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = float("nan")  # lost: no reward, as TRL has it
        listed = rewards.tolist()
        # TRL holds rewards in float32: the worst valid run's reward may round below the float64
        # threshold. Rounding is monotonic, so the threshold rounded the same way keeps it valid.
        valid_from = torch.tensor(self.valid_from, dtype=rewards.dtype).item()
        invalid = invalid_groups_of(listed, self.num_generations, valid_from)
        self._metrics["train"]["frac_groups_no_valid"].append(sum(invalid) / max(1, len(invalid)))
        if self.invalid_groups == "standardize" or not any(invalid):
            return output
        # This process's advantages placed in the step's layout: a treated group's new advantages
        # depend on the step's rewards alone, every other row keeps TRL's.
        start = self.accelerator.process_index * local_rows
        whole = [0.0] * len(listed)
        whole[start:start + local_rows] = output["advantages"].tolist()
        treated = treat_invalid_groups(whole, listed, self.num_generations, valid_from, self.invalid_groups)
        output["advantages"] = torch.tensor(treated[start:start + local_rows], dtype=output["advantages"].dtype,
                                            device=output["advantages"].device)
        return output

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.accelerator.device.type == "cpu":
            # The update's activations are freed now, but glibc keeps most of them in its heap: without
            # this they stay resident under the next step's engine sync and the evaluation after.
            release_memory()
        return loss

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        # TRL shuffles a step's sequences before splitting them into micro-batches. Where the
        # completion-only path shares a group's prompt (a device without Triton), the split is
        # redone with each prompt's rows side by side, so that a micro-batch of a group's size
        # holds one group: one prompt's forward and G completions, whatever groups_per_step is.
        # The step's gradient is the sum over its micro-batches either way.
        fresh = self.model.training and (
            self._step % (self.args.steps_per_generation * self.num_iterations) == 0 or self._buffered_inputs is None)
        inputs = super()._prepare_inputs(generation_batch)
        if fresh and self.args.steps_per_generation > 1 and not compact_head_native(self.accelerator.device) \
                and self.accelerator.num_processes == 1:  # several processes do not share prompts (below)
            regrouped = regroup_by_prompt(self._buffered_inputs)
            if regrouped is not None:
                self._buffered_inputs = regrouped
                inputs = regrouped[self._step % self.args.steps_per_generation]
        return inputs

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int,
                                           batch_size: int | None = None, compute_entropy: bool = False,
                                           **kwargs: Any) -> Any:
        extra = {k: v for k, v in kwargs.items() if v is not None and v is not False}
        # Several processes: `model` is DDP's wrapper, whose gradient sync needs one forward through
        # it per backward; the shared-prompt forwards below are two, so TRL's own path runs there.
        if extra or compact_head_native(input_ids.device) or self.accelerator.num_processes > 1:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, **kwargs)
        return completion_logps(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                                compute_entropy=compute_entropy, temperature=self.temperature,
                                entropy_requires_grad=getattr(self, "_entropy_bonus_enabled", True),
                                prompt_grad=self.prompt_grad)


def regroup_by_prompt(batches: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """TRL's buffered micro-batches of one step, re-split with the rows of each prompt (`prompt_ids`
    and `prompt_mask`) side by side, in as many micro-batches of the same size; None where the
    batches hold something this cannot reorder (a value that is neither a row-aligned tensor or
    list, a 0-dim tensor, nor None in every batch)."""
    from trl.trainer.utils import split_tensor_dict

    if len(batches) < 2 or any(set(b) != set(batches[0]) for b in batches):
        return None
    rows = sum(b["prompt_ids"].size(0) for b in batches)
    whole: dict[str, Any] = {}
    for key in batches[0]:
        values = [b[key] for b in batches]
        if all(v is None for v in values):
            whole[key] = None
        elif all(isinstance(v, torch.Tensor) and v.ndim == 0 for v in values):
            whole[key] = values[0]
        elif all(isinstance(v, torch.Tensor) and v.ndim >= 1 for v in values):
            if len({v.shape[1:] for v in values}) != 1:
                return None
            whole[key] = torch.cat(values)
        elif all(isinstance(v, list) for v in values):
            whole[key] = [x for v in values for x in v]
        else:
            return None
        if whole[key] is not None and not (isinstance(whole[key], torch.Tensor) and whole[key].ndim == 0) \
                and len(whole[key]) != rows:
            return None
    prompts = torch.cat([whole["prompt_ids"], whole["prompt_mask"].to(whole["prompt_ids"].dtype)], dim=1)
    order = torch.argsort(torch.unique(prompts, dim=0, return_inverse=True)[1], stable=True)

    def take(value: Any) -> Any:
        if value is None or (isinstance(value, torch.Tensor) and value.ndim == 0):
            return value
        if isinstance(value, torch.Tensor):
            return value[order.to(value.device)]
        return [value[i] for i in order.tolist()]

    return split_tensor_dict({key: take(value) for key, value in whole.items()}, len(batches))


def completion_logps(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *, batch_size: int | None,
                     compute_entropy: bool, temperature: float, entropy_requires_grad: bool,
                     share_prompts: bool = True, prompt_grad: bool = True, chunked_head: bool = True,
                     kv_heads: bool = True, gated_mlp: bool = True) -> tuple[Any, Any, None]:
    """The log-probability (and entropy) of each of the last `logits_to_keep` tokens, as TRL's fused
    head gives them (0 at padding), with the vocabulary projection on those positions only.

    share_prompts: rows of one call whose prompts (every position before the last `logits_to_keep`,
    tokens and mask) are identical, as a GRPO group's are, run their prompt through the model once
    (see `_shared_prompt_forward`). prompt_grad False: the prompts but their last token run without
    a graph (`_detached_prompt_forward`): the same values, a gradient that leaves out the path
    through the prompt's keys and values (ModelConfig.prompt_grad). chunked_head: the decoder's hidden
    states go through the head a tile of the vocabulary at a time (mleforge.train.grpo.chunked_head),
    so that the [rows, positions, vocabulary] logits and their gradient are never held whole, where
    the model's head allows it; off (or a head it cannot take), the model's own logits. kv_heads: the
    attention takes a grouped-query model's keys and values per key/value head on a CPU
    (mleforge.train.grpo.kv_heads) rather than copied out to every query head. gated_mlp: a gated
    SiLU MLP keeps its gate and up projections, not also their SiLU, for the backward pass on a
    CPU (mleforge.train.grpo.gated_mlp). Either way the values are the same to float precision."""
    rows = input_ids.size(0)
    split = split_head(model) if chunked_head else None
    if split is None:  # the logits are held: as many rows a call as MAX_LOGITS allows
        vocab = model.get_output_embeddings().weight.size(0)
        chunk = max(1, min(batch_size or rows, MAX_LOGITS // max(1, (logits_to_keep + 1) * vocab)))
    else:
        chunk = batch_size or rows
    order, bounds = None, list(range(0, rows, chunk)) + [rows]
    if share_prompts and chunk < rows:
        # TRL shuffled the step's rows: put each prompt's rows side by side, cut the chunks between
        # prompts where they fit, and give the results back in the rows' order.
        found = shared_prompts(input_ids, attention_mask, logits_to_keep)
        if found is not None:
            order = torch.argsort(found[1], stable=True)
            input_ids, attention_mask = input_ids[order], attention_mask[order]
            bounds = chunk_bounds(torch.bincount(found[1]).tolist(), chunk)
    logps, entropies = [], []
    with grouped_kv_on_cpu() if kv_heads else nullcontext(), lean_gated_mlp(model) if gated_mlp else nullcontext():
        for start, end in zip(bounds, bounds[1:]):
            lp, ent = _score_rows(model, split, input_ids[start:end], attention_mask[start:end], logits_to_keep,
                                  compute_entropy=compute_entropy, temperature=temperature,
                                  entropy_requires_grad=entropy_requires_grad, share_prompts=share_prompts,
                                  prompt_grad=prompt_grad)
            logps.append(lp)
            entropies.append(ent)
    logp, entropy = torch.cat(logps), (torch.cat(entropies) if compute_entropy else None)
    if order is not None:
        back = torch.argsort(order)
        logp, entropy = logp[back], (entropy[back] if entropy is not None else None)
    return logp, entropy, None


def _score_rows(model: Any, split: tuple[Any, Any] | None, ids: Any, mask: Any, logits_to_keep: int, *,
                compute_entropy: bool, temperature: float, entropy_requires_grad: bool, share_prompts: bool,
                prompt_grad: bool) -> tuple[Any, Any]:
    """completion_logps of one call's rows: (log-probabilities, entropies or None)."""
    scores = None  # the logits (or with `split`, the hidden states) that predict the kept tokens
    if not prompt_grad:
        scores = _detached_prompt_forward(model, split, ids, mask, logits_to_keep, share_prompts)
    elif share_prompts:
        scores = _shared_prompt_forward(model, split, ids, mask, logits_to_keep)
    if scores is None:
        # The last logits_to_keep + 1 positions: position t predicts token t + 1, the last predicts nothing.
        scores = last_positions(model, split, logits_to_keep + 1, input_ids=ids, attention_mask=mask,
                                use_cache=False)[0][:, :-1]
    keep, targets = mask[:, -logits_to_keep:], ids[:, -logits_to_keep:]
    if split is not None:
        lp, ent = head_logps(split[1], scores, targets, keep, temperature=temperature,
                             compute_entropy=compute_entropy, entropy_requires_grad=entropy_requires_grad)
    else:
        lp, ent = selective_log_softmax_and_entropy(scores.float(), targets,
                                                    entropy_requires_grad=entropy_requires_grad,
                                                    temperature=temperature, row_mask=keep)
    return lp.masked_fill(keep == 0, 0.0), ent


def last_positions(model: Any, split: tuple[Any, Any] | None, count: int, **kwargs: Any) -> tuple[Any, Any]:
    """(the logits of a forward's last `count` positions, or with `split` (mleforge.train.grpo.chunked_head's
    decoder and head) the decoder's hidden states there, which the head turns into those logits), and
    the forward's output (its key/value cache)."""
    if split is None:
        output = model(logits_to_keep=count, **kwargs)
        return output.logits, output
    output = split[0](**kwargs)
    return output.last_hidden_state[:, -count:], output


def chunk_bounds(groups: list[int], chunk: int) -> list[int]:
    """Where to cut consecutive groups of rows (their sizes, in order) into calls of at most `chunk`
    rows: whole groups together while they fit, a group larger than `chunk` across calls of its own.
    The bounds start at 0 and end at the rows' count."""
    bounds, used = [0], 0
    for size in groups:
        if used and used + size > chunk:
            bounds.append(bounds[-1] + used)
            used = 0
        while size > chunk:
            bounds.append(bounds[-1] + chunk)
            size -= chunk
        used += size
    if used:
        bounds.append(bounds[-1] + used)
    return bounds


def shared_prompts(input_ids: Any, attention_mask: Any, logits_to_keep: int) -> tuple[Any, Any] | None:
    """(the first row of each distinct prompt, each row's index among them), or None where every
    row's prompt differs (or there is no prompt). A prompt is a row's positions before its last
    `logits_to_keep`: token ids and attention mask both, so a group TRL left-padded to the batch's
    longest prompt is one prompt."""
    prompt_len = input_ids.size(1) - logits_to_keep
    if prompt_len < 1 or input_ids.size(0) < 2:
        return None
    key = torch.cat([input_ids[:, :prompt_len], attention_mask[:, :prompt_len].to(input_ids.dtype)], dim=1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
    if distinct.size(0) == input_ids.size(0):
        return None
    first = torch.full((distinct.size(0),), input_ids.size(0), dtype=torch.long, device=input_ids.device)
    first = first.scatter_reduce(0, inverse, torch.arange(input_ids.size(0), device=input_ids.device), "amin")
    return first, inverse


def _shared_prompt_forward(model: Any, split: tuple[Any, Any] | None, ids: Any, mask: Any, logits_to_keep: int) -> Any:
    """The logits `model(ids, logits_to_keep=logits_to_keep + 1).logits[:, :-1]` would give (with `split`,
    the hidden states they come from: `last_positions`), with each distinct prompt run through the
    model once; None where no two rows share a prompt, or the model cannot take a key/value cache here.

    A GRPO group is G completions of one prompt: on a CPU the cpu preset's ~1,250-token prompt
    and <=192-token completions make a group's four full sequences ~5,600 positions, and the
    shared prompt ~1,250 of them once plus ~770 of completions. The prompt's forward keeps its
    graph; its keys and values are indexed out to the rows (a differentiable gather, so the
    backward sums every row's gradient into the one prompt forward, as G separate forwards would)
    and the completions attend to them as to any cache. Positions and masks are those of the full
    forward (transformers numbers positions by cache position, padding included, in both), so the
    values and gradients equal it to float precision (tests/train/test_trainer_logps.py).
    """
    found = shared_prompts(ids, mask, logits_to_keep)
    if found is None or checkpointing_on(model):
        return None
    first, inverse = found
    prompt_len = ids.size(1) - logits_to_keep
    last, prompt = last_positions(model, split, 1, input_ids=ids[first, :prompt_len],
                                  attention_mask=mask[first, :prompt_len], use_cache=True)
    cache = full_cache(prompt)
    if cache is None:
        return None
    cache.batch_select_indices(inverse)
    completion, _ = last_positions(model, split, logits_to_keep, input_ids=ids[:, prompt_len:], attention_mask=mask,
                                   use_cache=True, **{cache_field(): cache})
    # The prompt's last position predicts the first completion token; the completion's last, nothing.
    return torch.cat([last[inverse], completion[:, :-1]], dim=1)


def _detached_prompt_forward(model: Any, split: tuple[Any, Any] | None, ids: Any, mask: Any, logits_to_keep: int,
                             share_prompts: bool) -> Any:
    """The logits `model(ids, logits_to_keep=logits_to_keep + 1).logits[:, :-1]` would give (with `split`,
    the hidden states they come from: `last_positions`), with every prompt position but the last run
    under `torch.no_grad()` (each distinct prompt once where `share_prompts`); None where that cannot be done here (a prompt of one token, a prefix of
    padding only, activation checkpointing, a cache whose layers may drop positions).

    The values are the full forward's; the gradient is the full one less the terms through the
    prompt's keys and values: what the completions' own positions (and the prompt's last, whose
    logits predict the first completion token) contribute, which is where a LoRA update on a
    CPU spends its time otherwise (the backward of a ~1,250-token prompt for <=192 completion
    tokens). See ModelConfig.prompt_grad for what it costs in quality.
    """
    head = ids.size(1) - logits_to_keep - 1  # prompt positions run without a graph
    if head < 1 or checkpointing_on(model):
        return None
    found = shared_prompts(ids, mask, logits_to_keep) if share_prompts else None
    first = found[0] if found is not None else torch.arange(ids.size(0), device=ids.device)  # else each row alone
    if not bool(mask[first, :head].any(dim=1).all()):
        return None  # a prefix of padding only attends to nothing
    with torch.no_grad():
        _, prefix = last_positions(model, split, 1, input_ids=ids[first, :head], attention_mask=mask[first, :head],
                                   use_cache=True)
    cache = full_cache(prefix)
    if cache is None:
        return None
    if found is not None:
        cache.batch_select_indices(found[1])
    scores, _ = last_positions(model, split, logits_to_keep + 1, input_ids=ids[:, head:], attention_mask=mask,
                               use_cache=True, **{cache_field(): cache})
    return scores[:, :-1]


def full_cache(output: Any) -> Any:
    """The key/value cache a forward with `use_cache=True` returned, where every layer keeps every
    position (a DynamicCache of DynamicLayers); None for sliding-window or other caches, whose
    layers may drop positions."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    cache = getattr(output, cache_field(), None)
    layers = getattr(cache, "layers", None)
    if not isinstance(cache, DynamicCache) or not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return None
    return cache


def cache_field() -> str:
    """The name transformers gives the key/value cache, as a forward's argument and output: `cache`
    from 5.x, `past_key_values` before (5.x still takes it, with a deprecation warning)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"


def checkpointing_on(model: Any) -> bool:
    """Whether gradient (activation) checkpointing is on: transformers turns the cache off under it."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model's transformers one
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # transformers 5.x's name, then 4.x's
        if hasattr(type(base), name):
            return bool(getattr(base, name))
    return False
