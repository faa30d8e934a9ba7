"""Completion log-probabilities and entropies through the LM head without the logits.

    split_head(model)      (the decoder, the head) of a causal LM whose logits are its decoder's last
                           hidden states through a plain linear layer (None for any other head)
    head_logps(...)        each kept position's log-probability of its token (and entropy),
                           projected through the head's weight a tile of the vocabulary at a time

The logits of a GRPO micro-batch are [rows, completion tokens, vocabulary] floats: one group of the
cpu preset (4 completions of up to 192 tokens) through Qwen2.5's 151,936-token vocabulary is
470 MB, and a log-softmax with its entropy holds several copies of it for the backward pass,
which makes a gradient of the same size again. TRL's ChunkedLogProbFunction (the kernel behind
its fused LM head, which runs as torch operations on a device without Triton) projects the
hidden states through a tile of the vocabulary at a time and keeps each position's running
log-sum-exp statistics; its backward recomputes each tile and turns it into the hidden states'
gradient in place. The logits never exist whole: what the backward keeps is the hidden states.
The values are the full logits' log-softmax and entropy to float precision
(tests/train/test_chunked_head.py).

Imports TRL: use it only where the `train` extra is installed.
"""

from __future__ import annotations

from typing import Any

import torch

# Vocabulary columns a tile of the projection covers: a tile is [positions, TILE_COLUMNS] floats
# (a group of the cpu preset's completions: 768 x 8,192 x 4 bytes, 25 MB), and its softmax
# statistics take a few temporaries of its size.
TILE_COLUMNS = 8192

# A text config's fields that scale or cap the logits (as TRL's add_fused_lm_head reads them):
# a model that has one takes the logits path.
SCALED_LOGITS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                 "logits_scaling")


def split_head(model: Any) -> tuple[Any, Any] | None:
    """(the decoder, the head) of `model` whose logits are the head of the decoder's last hidden states,
    where the head is a plain `torch.nn.Linear` and the config scales or caps nothing; None otherwise
    (a multimodal model, an adapter on the head, Gemma's soft-capping, Granite's logit scaling), and
    where the installed TRL has no ChunkedLogProbFunction (before 1.x)."""
    try:
        from trl.kernels import ChunkedLogProbFunction  # noqa: F401
    except ImportError:
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model's transformers one
    config = getattr(base, "config", None)
    if config is None or not hasattr(config, "get_text_config") or config.get_text_config() is not config:
        return None
    if any(getattr(config, name, None) is not None for name in SCALED_LOGITS):
        return None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear:
        return None
    decoder = getattr(base, "base_model", None)
    return None if decoder is None or decoder is base else (decoder, head)


def head_logps(head: Any, hidden: Any, targets: Any, keep: Any, *, temperature: float, compute_entropy: bool,
               entropy_requires_grad: bool) -> tuple[Any, Any]:
    """(log-probabilities, entropies) [rows, positions] of `targets` under the logits that `head` (a
    torch.nn.Linear) gives `hidden` [rows, positions, hidden size], divided by `temperature`; 0 where `keep` is 0 (padding,
    never projected). The entropies are None unless `compute_entropy`, and have no gradient unless
    `entropy_requires_grad`."""
    from trl.kernels import ChunkedLogProbFunction

    rows = keep.bool()
    outputs = ("entropy",) if compute_entropy else ()
    logps, entropy, *_ = ChunkedLogProbFunction.apply(hidden[rows], head.weight, head.bias, targets[rows],
                                                      temperature, TILE_COLUMNS, None, 1.0, outputs)
    if entropy is not None and not entropy_requires_grad:
        entropy = entropy.detach()
    # masked_scatter keeps the result connected to the graph even where no position is kept.
    logps = hidden.new_zeros(rows.shape, dtype=logps.dtype).masked_scatter(rows, logps)
    if entropy is not None:
        entropy = hidden.new_zeros(rows.shape, dtype=entropy.dtype).masked_scatter(rows, entropy)
    return logps, entropy
