"""Tiny random models and small records for the training tests (built offline, in seconds)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.policies.tiny_model import build_tiny_model

# A rendered prompt is ~4,000 tokens of the tiny byte-level tokenizer: give RoPE room.
CONTEXT = 8192


def tiny_model(folder: Path) -> Path:
    """tests/policies/tiny_model.py's random Llama, with a context long enough for real prompts."""
    build_tiny_model(folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = CONTEXT
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def sample(task_id: str, stage: str, question: str, answer: str) -> dict:
    """One SFT sample in the format `mleforge collect` writes."""
    return {
        "prompt": [{"role": "system", "content": "You write code."}, {"role": "user", "content": question}],
        "completion": [{"role": "assistant", "content": answer}],
        "task_id": task_id, "stage": stage, "state_id": f"{task_id}-{stage}", "teacher": "template",
        "ideas": ["use a random forest"], "outcome": "valid",
    }
