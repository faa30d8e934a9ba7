"""The SFT trainer: TRL's SFTTrainer, with its LM head on the completion positions on a CPU.

TRL 1.16's SFTTrainer computes its loss with the fused LM head (`add_fused_lm_head`): the
backbone's hidden states go through the vocabulary projection in tiles and come back as
per-token log-probabilities, entropies and top-1 hits. Where Triton runs it projects only
the positions whose label counts; elsewhere (a CPU) it projects every position, so that
tile shapes stay fixed. A warm-start sample of the cpu preset is a long prompt and a short
completion whose loss alone counts, so there the head did several times the work needed
(`python benchmarks/lm_head.py --objective sft` measures it).

`CompletionSFTTrainer.compute_loss` gives the fused head only what it would score anyway:
the hidden states from the first column with a counted label on, and the matching
pre-shifted labels (`shift_labels`, which the fused head takes as they are). The cut is a
forward hook on the backbone, in place for that one call. Everything else is TRL's own
compute_loss: the loss and its normalisation, the metrics, gradient accumulation. Where the
head already compacts (Triton), and for what the cut does not cover (label smoothing, a
custom loss function, MoE auxiliary losses, sequence or context parallelism, multimodal
models, asking for the outputs), it is TRL's path unchanged. tests/train/test_sft_trainer.py
checks that losses, gradients and metrics are equal either way.

With ModelConfig.prompt_grad off (the cpu preset's), the columns before the first counted label
also run without a graph (`prefix_without_graph`, a pre-hook on the backbone): the same loss, and
the gradient less its path through those columns' keys and values.

Imports TRL: use it only where the `train` extra is installed.
"""

from __future__ import annotations

from typing import Any

import torch
from trl import SFTTrainer

from mleforge.train.grpo.trainer import (
    cache_field,
    checkpointing_on,
    compact_head_native,
    full_cache,
)


class CompletionSFTTrainer(SFTTrainer):
    def __init__(self, *args: Any, prompt_grad: bool = True, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prompt_grad = prompt_grad

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        backbone = None if return_outputs else self._cut_backbone(inputs)
        if backbone is None:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        shifted = inputs["labels"][:, 1:]
        counted = (shifted != -100).any(dim=0).nonzero()
        # From the first column a counted label is on; with none, the last column (a zero loss).
        first = int(counted[0]) if counted.numel() else shifted.size(1) - 1
        trimmed = {k: v for k, v in inputs.items() if k != "labels"}
        trimmed["shift_labels"] = shifted[:, first:]

        # The column the backbone's output starts at: 0, or `first` where the columns before it ran
        # without a graph (prompt_grad off: detach_prefix).
        start = [0]

        def keep_counted(module: Any, args: Any, output: Any) -> Any:
            # Hidden state t predicts token t + 1: columns first..L-2 go with shift_labels.
            output.last_hidden_state = output.last_hidden_state[:, first - start[0]:-1]
            return output

        def detach_prefix(module: Any, args: Any, kwargs: dict[str, Any]) -> Any:
            changed = prefix_without_graph(module, args, kwargs, first)
            if changed is None:
                return None
            start[0] = first
            return args, changed

        handles = [backbone.register_forward_hook(keep_counted)]
        if not self.prompt_grad and first >= 1 and not checkpointing_on(model):
            handles.append(backbone.register_forward_pre_hook(detach_prefix, with_kwargs=True))
        try:
            return super().compute_loss(model, trimmed, return_outputs=False, num_items_in_batch=num_items_in_batch)
        finally:
            for handle in handles:
                handle.remove()

    def _cut_backbone(self, inputs: dict[str, Any]) -> Any:
        """The module whose output the fused head projects, where cutting it to the counted
        positions is the same computation; None where TRL's path must run as it is."""
        labels = inputs.get("labels")
        if (labels is None or labels.dim() != 2 or labels.size(1) < 2 or "shift_labels" in inputs
                or compact_head_native(labels.device) or self.compute_loss_func is not None
                or self.label_smoother is not None or self.aux_loss_enabled):
            return None
        parallelism = getattr(self.accelerator, "parallelism_config", None)
        if parallelism is not None and (getattr(parallelism, "sp_enabled", False)
                                        or getattr(parallelism, "cp_enabled", False)):
            return None
        model = self.accelerator.unwrap_model(self.model)
        if hasattr(model, "get_base_model"):  # PEFT: the fused head is on the base model
            model = model.get_base_model()
        if model.config.get_text_config() is not model.config:  # multimodal: its own backbone layout
            return None
        backbone = getattr(model, "base_model", None)
        return None if backbone is None or backbone is model else backbone


# The backbone's keyword arguments a plain text call of TRL's fused head gives it.
PLAIN_CALL = frozenset({"input_ids", "attention_mask", "use_cache", "return_dict"})


def prefix_without_graph(backbone: Any, args: Any, kwargs: dict[str, Any], cut: int) -> dict[str, Any] | None:
    """The backbone's keyword arguments with columns 0..cut-1 already run under `torch.no_grad()`:
    the input ids from `cut` on and the prefix's key/value cache; None where the call is not one
    this applies to (positional arguments; anything but ids, mask and use_cache given, such as
    position ids, embeddings or a cache; a row whose prefix is padding only; a cache whose layers
    may drop positions). The hidden states from `cut` on are the full forward's; the gradient
    leaves out the path through the prefix's keys and values (ModelConfig.prompt_grad)."""
    field = cache_field()
    ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    if args or ids is None or mask is None or ids.dim() != 2 or mask.shape != ids.shape or ids.size(1) <= cut:
        return None
    # Only a plain text call: anything else given (position ids, embeddings, a cache, token types)
    # would have to be cut in two as well.
    if any(value is not None and value is not False for key, value in kwargs.items() if key not in PLAIN_CALL):
        return None
    if not bool(mask[:, :cut].any(dim=1).all()):
        return None
    with torch.no_grad():
        # forward, not __call__: the trainer's hooks on the backbone are for the whole call only.
        prefix = backbone.forward(input_ids=ids[:, :cut], attention_mask=mask[:, :cut], use_cache=True)
    cache = full_cache(prefix)
    if cache is None:
        return None
    return {**kwargs, "input_ids": ids[:, cut:], field: cache}
