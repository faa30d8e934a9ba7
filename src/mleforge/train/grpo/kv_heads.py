"""Attention on a grouped-query model's key/value heads during a CPU update.

    with grouped_kv_on_cpu():     transformers' SDPA attention gives torch the keys and values
        ...                       per key/value head (enable_gqa) for CPU tensors

transformers' SDPA attention copies a grouped-query model's keys and values out to every query
head (`repeat_kv`) whenever an attention mask is given, except where it knows the device's kernel
takes them grouped (`use_gqa_in_sdpa`: no mask on CUDA, newer XPU and MPS). A GRPO update always has
a mask (left-padded prompts, right-padded completions), so on a CPU each layer's keys and values
over the prompt and the completions are copied 7 times (Qwen2.5-0.5B: 14 query heads on 2
key/value heads) and kept for the backward pass: about 0.9 GB for one group of the cpu preset.
torch's CPU flash-attention kernel takes grouped heads with a mask (`enable_gqa`, torch 2.5 on):
the same values, without the copies. Inside the block, transformers' choice is True for CPU
tensors and its own for any other device (and everywhere before torch 2.5); outside, it is
transformers' own everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def grouped_kv_on_cpu() -> Iterator[None]:
    """Within the block, transformers' SDPA attention passes grouped keys and values to torch for CPU
    tensors (see the module docstring); a transformers without that choice is left as it is."""
    import torch

    try:
        from transformers.integrations import sdpa_attention
    except ImportError:
        yield
        return
    if tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < (2, 5):  # no enable_gqa
        yield
        return
    original = getattr(sdpa_attention, "use_gqa_in_sdpa", None)
    if original is None or getattr(original, "_mleforge_cpu", False):  # none to change, or changed already
        yield
        return

    def on_cpu(attention_mask: Any, key: Any, *args: Any, **kwargs: Any) -> bool:
        return key.device.type == "cpu" or bool(original(attention_mask, key, *args, **kwargs))

    on_cpu._mleforge_cpu = True  # type: ignore[attr-defined]
    sdpa_attention.use_gqa_in_sdpa = on_cpu
    try:
        yield
    finally:
        sdpa_attention.use_gqa_in_sdpa = original
