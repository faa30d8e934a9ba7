"""What approach a script takes: a `ScriptSpec` (a model family of
`mleforge.reference.solutions.FAMILIES`, its parameters, feature options and a
validation scheme), and the estimator it names.

Every script starts with a machine-readable header, `# template-spec: {json}`,
so a later debug or improve step can tell the expert's own scripts from foreign
ones and know which approach a script took (`read_spec`). Spec bounds (trees,
boosting iterations, TF-IDF vocabulary) keep one script to about a minute on
two cores.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

from mleforge.expert.profile import TaskProfile
from mleforge.reference.solutions import FAMILIES, WIDE_PCA

SPEC_PREFIX = "# template-spec: "
SPEC_VERSION = 1
VALIDATIONS = ("holdout", "kfold")
FOLDS = 5
HOLDOUT = 0.2
SCALES = ("standard", "minmax", "none")
DROPPABLE = ("categorical", "text", "date")
# Bounds that keep one script to about a minute on two cores (ScriptSpec enforces them).
MAX_TREES = 300
MAX_BOOSTING_ITERATIONS = 300
MAX_TEXT_FEATURES = 5000
N_JOBS = 2
_SPEC_RE = re.compile(r"^# template-spec: (\{.*\})\s*$", re.MULTILINE)


class ScriptSpecError(ValueError):
    """A spec names an unknown family, option or value."""


def _freeze(value: Any) -> Any:
    """JSON lists back to tuples, so a spec stays hashable and round-trips exactly."""
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


@dataclass(frozen=True)
class ScriptSpec:
    """One approach. `params` are estimator keyword arguments on top of the family's defaults
    (sorted `(name, value)` pairs of JSON values); the rest are feature and validation options.

    `drop` leaves roles of columns out (a safer variant after a feature step failed);
    `regress` fits a regressor and rounds to labels (ordinal tasks); `log_target` fits
    log1p(target) (RMSLE). `seed` seeds the split and every seeded estimator.
    """

    family: str
    params: tuple[tuple[str, Any], ...] = ()
    scale: str = "standard"
    dense: bool = False
    text_max_features: int = 2000
    pca: int | None = None
    drop: tuple[str, ...] = ()
    validation: str = "holdout"
    log_target: bool = False
    regress: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ScriptSpecError(f"unknown family {self.family!r}; expected one of {', '.join(FAMILIES)}")
        params = self.params.items() if isinstance(self.params, Mapping) else self.params
        object.__setattr__(self, "params", tuple(sorted((str(k), _freeze(v)) for k, v in params)))
        object.__setattr__(self, "drop", tuple(sorted(set(self.drop))))
        if self.scale not in SCALES:
            raise ScriptSpecError(f"scale must be one of {', '.join(SCALES)}; got {self.scale!r}")
        if self.validation not in VALIDATIONS:
            raise ScriptSpecError(f"validation must be one of {', '.join(VALIDATIONS)}; got {self.validation!r}")
        if not set(self.drop) <= set(DROPPABLE):
            raise ScriptSpecError(f"drop may name {', '.join(DROPPABLE)}; got {self.drop!r}")
        if not 1 <= self.text_max_features <= MAX_TEXT_FEATURES:
            raise ScriptSpecError(f"text_max_features must be in [1, {MAX_TEXT_FEATURES}]")
        if self.pca is not None and self.pca < 1:
            raise ScriptSpecError(f"pca must be a positive number of components; got {self.pca}")
        bounds = {"n_estimators": MAX_TREES} if self.family in ("random_forest", "extra_trees") else \
            {"max_iter": MAX_BOOSTING_ITERATIONS} if self.family == "hist_gb" else {}
        for key, bound in bounds.items():
            if not 1 <= self.kwargs.get(key, 1) <= bound:
                raise ScriptSpecError(f"{key} must be in [1, {bound}] to keep a run short; got {self.kwargs[key]}")

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def with_params(self, **params: Any) -> ScriptSpec:
        return replace(self, params={**self.kwargs, **params})

    def approach(self) -> tuple:
        """Everything but the seed: two specs with equal approaches take the same approach."""
        return (self.family, self.params, self.scale, self.dense, self.text_max_features, self.pca,
                self.drop, self.validation, self.log_target, self.regress)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["params"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}
        data["drop"] = list(self.drop)
        return {"v": SPEC_VERSION, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptSpec:
        if not isinstance(data, Mapping) or data.get("v") != SPEC_VERSION:
            raise ScriptSpecError(f"not a version-{SPEC_VERSION} template spec")
        known = set(cls.__dataclass_fields__)
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError as exc:
            raise ScriptSpecError(str(exc)) from None

    def header(self) -> str:
        return SPEC_PREFIX + json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


def read_spec(code: str | None) -> ScriptSpec | None:
    """The spec in a script's `# template-spec:` header, or None for a foreign script."""
    match = _SPEC_RE.search(code or "")
    if match is None:
        return None
    try:
        return ScriptSpec.from_dict(json.loads(match.group(1)))
    except (ValueError, ScriptSpecError):
        return None


def uses_regressor(spec: ScriptSpec, profile: TaskProfile) -> bool:
    return profile.problem == "regression" or spec.regress


def make_spec(family: str, profile: TaskProfile, **options: Any) -> ScriptSpec:
    """A spec with the family's feature defaults (as the reference grid uses them)."""
    defaults = dict(FAMILIES[family].features or {})
    base: dict[str, Any] = {"scale": defaults.get("scale", "standard"), "dense": bool(defaults.get("dense")),
                            "text_max_features": int(defaults.get("text_max_features", 2000))}
    if profile.wide and family in ("knn", "gaussian_nb", "hist_gb", "mlp"):
        base["pca"] = WIDE_PCA
    return normalize(ScriptSpec(family, **{**base, **options}), profile)


# Settings an idea always names, even at their default value ("Random forest (100 trees)").
HEADLINE_PARAMS = ("C", "alpha", "n_estimators", "learning_rate", "max_iter", "n_neighbors",
                   "hidden_layer_sizes", "max_depth")


def normalize(spec: ScriptSpec, profile: TaskProfile) -> ScriptSpec:
    """The spec without parameters that repeat what the estimator would use anyway, so two
    specs that run the same model compare equal (headline settings are kept, to be named)."""
    path, family_defaults = estimator_path(spec, profile)
    defaults = {**estimator_defaults(path), **family_defaults}
    kept = {k: v for k, v in spec.params
            if k in HEADLINE_PARAMS or k not in defaults or _freeze(defaults[k]) != v}
    scaled = any(profile.has(r) and r not in spec.drop for r in ("numeric", "date"))
    # Scaling applies to numbers and dates only; without them every scale is the same model.
    return replace(spec, params=kept, scale=spec.scale if scaled else "none")


@lru_cache(maxsize=64)
def estimator_defaults(path: str) -> dict[str, Any]:
    """The estimator's constructor defaults (a cached dict: read it, never change it)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)().get_params()


def estimator_path(spec: ScriptSpec, profile: TaskProfile) -> tuple[str, dict[str, Any]]:
    """The spec's estimator import path and the family's default arguments for it."""
    family = FAMILIES[spec.family]
    regress = uses_regressor(spec, profile)
    path = family.regressor if regress else family.classifier
    if path is None:
        kind = "regression" if regress else "classification"
        raise ScriptSpecError(f"family {spec.family} has no {kind} estimator")
    return path, dict(family.regressor_defaults if regress else family.classifier_defaults)
