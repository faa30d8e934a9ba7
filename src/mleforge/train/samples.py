"""SFT samples: one expert step each, in TRL's conversational prompt-completion format.

A samples file is JSONL, one object per line (what `mleforge collect` writes):

    {"prompt": [{"role": "system", "content": ...}, {"role": "user", "content": ...}],
     "completion": [{"role": "assistant", "content": ...}],
     "task_id": "titanic", "stage": "improve", "state_id": "...", "teacher": "template",
     "ideas": ["..."], "outcome": "valid"}

The prompt is the state's prompt as the agent renders it; the completion the action, in the
format its stage asks for (a whole script for draft, edit blocks for debug and improve).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mleforge.errors import ConfigError
from mleforge.reward.components import CASES, STAGES

PROMPT_ROLES = ("system", "user")


@dataclass(frozen=True)
class SFTSample:
    prompt: tuple[dict[str, str], ...]
    completion: tuple[dict[str, str], ...]
    task_id: str
    stage: str
    state_id: str = ""
    teacher: str = ""
    ideas: tuple[str, ...] = ()
    outcome: str = "valid"

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": [dict(m) for m in self.prompt], "completion": [dict(m) for m in self.completion],
                "task_id": self.task_id, "stage": self.stage, "state_id": self.state_id, "teacher": self.teacher,
                "ideas": list(self.ideas), "outcome": self.outcome}

    @classmethod
    def from_dict(cls, data: Any, where: str = "sample") -> SFTSample:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a JSON object; got {type(data).__name__}")
        prompt = _messages(data.get("prompt"), f"{where}: prompt", PROMPT_ROLES)
        completion = _messages(data.get("completion"), f"{where}: completion", ("assistant",))
        if len(completion) != 1:
            raise ConfigError(f"{where}: completion must be exactly one assistant message; got {len(completion)}")
        task_id, stage = data.get("task_id"), data.get("stage")
        if not isinstance(task_id, str) or not task_id:
            raise ConfigError(f"{where}: task_id must name the sample's task")
        if stage not in STAGES:
            raise ConfigError(f"{where}: stage must be one of {', '.join(STAGES)}; got {stage!r}")
        outcome = data.get("outcome", "valid")
        if outcome not in CASES:
            raise ConfigError(f"{where}: outcome must be one of {', '.join(CASES)}; got {outcome!r}")
        ideas = data.get("ideas") or []
        if not isinstance(ideas, list) or not all(isinstance(i, str) for i in ideas):
            raise ConfigError(f"{where}: ideas must be a list of strings")
        return cls(prompt, completion, task_id, stage, str(data.get("state_id") or ""),
                   str(data.get("teacher") or ""), tuple(ideas), outcome)


def _messages(value: Any, where: str, roles: tuple[str, ...]) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where} must be a non-empty list of chat messages ({{'role': ..., 'content': ...}})")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in roles or not isinstance(
                message.get("content"), str):
            raise ConfigError(f"{where}[{i}]: expected {{'role': {' | '.join(roles)}, 'content': text}}; "
                              f"got {message!r:.120}")
        out.append({"role": message["role"], "content": message["content"]})
    return tuple(out)


def sample_files(path: str | Path) -> list[Path]:
    """`path` itself, or every *.jsonl under the folder `path`, sorted."""
    path = Path(path).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(path.rglob("*.jsonl"))
        if files:
            return files
        raise ConfigError(f"{path} holds no *.jsonl samples files; run `mleforge collect` to make them")
    raise ConfigError(f"no samples at {path}: give a JSONL file or a folder of them")


def read_samples(path: str | Path, stages: Sequence[str] | None = None) -> list[SFTSample]:
    """Every sample in `path` (a file or a folder), in file and line order; a malformed line
    is refused with its file and line number. `stages` keeps only those stages."""
    out = []
    for file in sample_files(path):
        with open(file, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                where = f"{file}:{number}"
                try:
                    data = json.loads(line)
                except ValueError as exc:
                    raise ConfigError(f"{where}: not JSON ({exc})") from None
                sample = SFTSample.from_dict(data, where)
                if stages is None or sample.stage in stages:
                    out.append(sample)
    if not out:
        raise ConfigError(f"no samples in {path}" + (f" of stages {', '.join(stages)}" if stages else ""))
    return out


def write_samples(samples: Iterable[SFTSample], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for sample in samples:
            handle.write(json.dumps(sample.to_dict(), ensure_ascii=False) + "\n")
    return path


def sample_tokens(sample: SFTSample, tokenizer: Any) -> int:
    """Prompt + completion tokens as the chat template renders the conversation."""
    ids = tokenizer.apply_chat_template([*sample.prompt, *sample.completion], tokenize=True, return_dict=True)
    return len(ids["input_ids"])


def fit_samples(samples: Sequence[SFTSample], tokenizer: Any, max_length: int) -> tuple[list[SFTSample], int]:
    """The samples of at most `max_length` tokens, and how many were longer (left out, not cut:
    a cut completion would teach a broken action)."""
    kept = [s for s in samples if sample_tokens(s, tokenizer) <= max_length]
    return kept, len(samples) - len(kept)


def tasks_of(samples: Iterable[SFTSample]) -> list[str]:
    return list(dict.fromkeys(s.task_id for s in samples))
