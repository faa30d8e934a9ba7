"""Draft: follow one of the state's ideas if it has any, else a seeded, strength-weighted
draw from the task's catalog. `match_idea` reads an idea from outside the catalog (an
LLM's) by the model family and validation it names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from mleforge.agent.state import State
from mleforge.expert.catalog import catalog, strength
from mleforge.expert.choice import Choice, choice_rng, sample_spec, seeded_order, tried_approaches
from mleforge.expert.description import describe
from mleforge.expert.profile import TaskProfile
from mleforge.expert.spec import ScriptSpec

_FAMILY_WORDS = (
    ("hist_gb", ("boost", "gbm", "gbdt", "xgb", "catboost")),
    ("random_forest", ("random forest", "randomforest")),
    ("extra_trees", ("extra trees", "extra-trees", "extratrees", "extremely randomized")),
    ("multinomial_nb", ("multinomial naive bayes", "multinomialnb", "multinomial nb")),
    ("gaussian_nb", ("gaussian naive bayes", "gaussiannb", "gaussian nb")),
    ("knn", ("nearest neighbo", "knn", "k-nn")),
    ("mlp", ("mlp", "neural", "perceptron", "network")),
    ("tree", ("decision tree",)),
    ("linear", ("logistic", "linear", "ridge", "lasso", "elastic", "svm", "sgd")),
    ("constant", ("constant", "dummy")),
)
_WORD_RE = re.compile(r"[a-z0-9.]+")


def _words(text: str) -> set[str]:
    return set(_WORD_RE.findall(text.lower()))


def match_idea(idea: str, specs: Sequence[ScriptSpec], profile: TaskProfile) -> list[ScriptSpec]:
    """Catalog specs that implement a free-text idea, best match first.

    An idea written by `describe` matches its spec exactly; any other (an LLM's) is matched
    by the model family it names, the validation it asks for, then by shared words.
    """
    text = " ".join(idea.lower().split())
    exact = [s for s in specs if describe(s, profile).lower() == text]
    if exact:  # then its neighbours: the same family and validation, closest wording first
        words = _words(text)
        near = [s for s in specs if s.family == exact[0].family and s.validation == exact[0].validation
                and s not in exact]
        return exact + sorted(near, key=lambda s: -len(words & _words(describe(s, profile))))
    families = [f for f, words in _FAMILY_WORDS if any(w in text for w in words)]
    if "naive bayes" in text and not {"multinomial_nb", "gaussian_nb"} & set(families):
        families.append("multinomial_nb" if profile.has("text") else "gaussian_nb")
    pool = [s for s in specs if s.family in families] or list(specs)
    wants_cv = any(w in text for w in ("fold", "cross-val", "cross val", " cv"))
    wants_holdout = any(w in text for w in ("holdout", "hold-out", "held-out", "validation split"))
    if wants_cv != wants_holdout:
        pool = [s for s in pool if (s.validation == "kfold") == wants_cv] or pool
    words = _words(text)
    return sorted(pool, key=lambda s: -len(words & _words(describe(s, profile))))  # stable: catalog order


def draft_choices(state: State, profile: TaskProfile, n: int, seed: int | None) -> list[Choice]:
    specs = catalog(profile)
    tried = tried_approaches(state.journal)
    fresh = [s for s in specs if s.approach() not in tried] or specs
    rng = choice_rng(seed, state, 0)
    if state.ideas:
        # Each idea's best match first (in a seeded order), then its next-best matches.
        candidates, source = [], {}
        for idea in state.ideas:
            for rank, spec in enumerate(match_idea(idea, fresh, profile)[:4]):
                candidates.append((spec, min(rank, 1), 1.0))
                source.setdefault(spec, idea)
        ordered = seeded_order(candidates, rng)
        chosen = [sample_spec(ordered, j, seed, state) for j in range(n)]
        return [Choice(s, _idea_opening(source[replace(s, seed=0)], s, profile)) for s in chosen]
    ordered = seeded_order([(s, 0, 1.0 + strength(s, profile)) for s in fresh], rng)
    return [Choice(s, f"Idea: {describe(s, profile)}.")
            for s in (sample_spec(ordered, j, seed, state) for j in range(n))]


def _idea_opening(idea: str, spec: ScriptSpec, profile: TaskProfile) -> str:
    closest = describe(spec, profile)
    if closest.lower() == " ".join(idea.lower().split()):
        return f"Idea: {closest}."
    return f"Idea (suggested): {idea}\nImplemented as: {closest}."
