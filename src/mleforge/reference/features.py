"""Task-agnostic features: a scikit-learn preprocessor built from a task's spec and frames.

Every column of `train.csv` but the id and the target gets one role:

    numeric      numbers (booleans included): median impute, optional scaling
    date         ISO date strings: year, month, day of week, day of year
    text         long or many-worded free text: TF-IDF of word 1-2 grams
    categorical  any other string column: one-hot, rare values grouped

The roles are plain data (`ColumnRoles`) so that a solution script can be
rendered from them later; `build_preprocessor` turns them into a ColumnTransformer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.compose import ColumnTransformer
from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer, MinMaxScaler, OneHotEncoder, StandardScaler

from mleforge.tasks.spec import TaskSpec

# A column is free text when its values are long (TEXT_MIN_CHARS) or many-worded
# (TEXT_MIN_WORDS, e.g. passenger names whose titles carry signal) and mostly distinct.
TEXT_MIN_CHARS = 30.0
TEXT_MIN_WORDS = 3.0
TEXT_MIN_UNIQUE_RATIO = 0.5
# YYYY-MM-DD, optionally followed by a time.
_ISO_DATE = r"^\d{4}-\d{2}-\d{2}(?:[T ].*)?$"
DATE_PARTS = ("year", "month", "day_of_week", "day_of_year")
SCALERS = ("standard", "minmax", "none")


@dataclass(frozen=True)
class ColumnRoles:
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    text: tuple[str, ...]
    date: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.numeric, *self.categorical, *self.text, *self.date)

    def to_dict(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in asdict(self).items()}


def feature_columns(spec: TaskSpec, train: pd.DataFrame) -> list[str]:
    """Every column of train.csv but the id, the target and the submission's target columns."""
    dropped = {spec.submission.id_column, spec.target, *spec.submission.target_columns}
    return [c for c in train.columns if c not in dropped]


def _is_date(values: pd.Series) -> bool:
    sample = values.dropna().astype(str)
    return len(sample) > 0 and bool(sample.str.match(_ISO_DATE).all())


def _text_stats(values: pd.Series) -> tuple[float, float, float]:
    """Mean characters, mean words and the distinct-value ratio of the non-missing values."""
    text = values.dropna().astype(str)
    if text.empty:
        return 0.0, 0.0, 0.0
    words = text.str.split().str.len()
    return float(text.str.len().mean()), float(words.mean()), text.nunique() / len(text)


def infer_roles(spec: TaskSpec, train: pd.DataFrame) -> ColumnRoles:
    """Assign each feature column a role from its dtype and values (see the module doc)."""
    numeric, categorical, text, date = [], [], [], []
    stats: dict[str, tuple[float, float, float]] = {}
    for column in feature_columns(spec, train):
        values = train[column]
        if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
            numeric.append(column)
        elif _is_date(values):
            date.append(column)
        else:
            chars, words, unique = stats[column] = _text_stats(values)
            long_text = chars > TEXT_MIN_CHARS or words >= TEXT_MIN_WORDS
            (text if long_text and unique > TEXT_MIN_UNIQUE_RATIO else categorical).append(column)
    # A text task always reads its text: the longest string column, even if it looks short.
    if spec.modality == "text" and not text and categorical:
        longest = max(categorical, key=lambda c: stats[c][0])
        categorical.remove(longest)
        text.append(longest)
    return ColumnRoles(tuple(numeric), tuple(categorical), tuple(text), tuple(date))


def date_parts(frame: pd.DataFrame) -> np.ndarray:
    """Year, month, day of week and day of year of each ISO date column (NaN where unparsable)."""
    parts = []
    for column in frame.columns:
        dates = pd.to_datetime(frame[column].astype(object), format="ISO8601", errors="coerce")
        parts += [getattr(dates.dt, name).astype(float) for name in DATE_PARTS]
    return np.column_stack(parts) if parts else np.empty((len(frame), 0))


def _date_names(transformer: object, names: list[str]) -> list[str]:
    return [f"{c}_{p}" for c in names for p in DATE_PARTS]


def _as_object(frame: pd.DataFrame) -> pd.DataFrame:
    """Strings as plain objects with NaN for missing, which every encoder accepts."""
    return frame.astype(object).where(frame.notna(), np.nan)


def _fill_text(values: pd.Series) -> list[str]:
    return ["" if pd.isna(v) else str(v) for v in values]


class TopTermsCounts(TransformerMixin, BaseEstimator):
    """Word n-gram counts over the `max_terms` most frequent terms (total count over the
    training texts), kept in vocabulary order: `CountVectorizer(max_features=...)` with one
    difference, the choice among terms whose counts tie at the cut. scikit-learn picks them
    with numpy's default (unstable) argsort, whose SIMD kernels differ between CPUs (AVX2,
    AVX-512, none), so the same data kept different terms on different machines; here a
    stable sort keeps the alphabetically first, on every machine.
    """

    def __init__(self, ngram_range: tuple[int, int] = (1, 2), min_df: int = 2, max_terms: int | None = None):
        self.ngram_range = ngram_range
        self.min_df = min_df
        self.max_terms = max_terms

    def fit(self, texts, y=None) -> TopTermsCounts:
        self.fit_transform(texts)
        return self

    def fit_transform(self, texts, y=None):
        counter = CountVectorizer(ngram_range=self.ngram_range, min_df=self.min_df, dtype=np.float64)
        counts = counter.fit_transform(texts)
        if self.max_terms is not None and counts.shape[1] > self.max_terms:
            totals = np.asarray(counts.sum(axis=0)).ravel()
            keep = np.sort(np.argsort(-totals, kind="stable")[: self.max_terms])
            terms = counter.get_feature_names_out()[keep]
            counter.vocabulary_ = {str(term): i for i, term in enumerate(terms)}
            counts = counts[:, keep]
        self.counter_ = counter
        return counts

    def transform(self, texts):
        return self.counter_.transform(texts)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        return self.counter_.get_feature_names_out()


def _scaler(scale: str):
    if scale == "standard":
        return StandardScaler()
    if scale == "minmax":
        # clip: test values beyond the training range stay in [0, 1] (naive Bayes needs >= 0).
        return MinMaxScaler(clip=True)
    return "passthrough"


def build_preprocessor(
    roles: ColumnRoles,
    *,
    scale: str = "standard",
    dense: bool = False,
    text_max_features: int = 5000,
    min_frequency: int = 10,
    max_categories: int = 30,
) -> ColumnTransformer:
    """A ColumnTransformer for these roles.

    `scale` (standard | minmax | none) applies to numeric and date features; `dense`
    forces a dense output for models that reject sparse input (histogram boosting,
    Gaussian naive Bayes, PCA). One-hot encoding groups categories seen fewer than
    `min_frequency` times and ignores categories unseen in training.
    """
    if scale not in SCALERS:
        raise ValueError(f"scale must be one of {', '.join(SCALERS)}, got {scale!r}")
    blocks: list[tuple[str, object, object]] = []
    if roles.numeric:
        numeric = make_pipeline(SimpleImputer(strategy="median"), _scaler(scale))
        blocks.append(("numeric", numeric, list(roles.numeric)))
    if roles.date:
        date = make_pipeline(
            FunctionTransformer(date_parts, feature_names_out=_date_names),
            SimpleImputer(strategy="median"),
            _scaler(scale),
        )
        blocks.append(("date", date, list(roles.date)))
    if roles.categorical:
        categorical = make_pipeline(
            FunctionTransformer(_as_object, feature_names_out="one-to-one"),
            SimpleImputer(strategy="constant", fill_value="missing"),
            OneHotEncoder(
                handle_unknown="infrequent_if_exist",
                min_frequency=min_frequency,
                max_categories=max_categories,
                sparse_output=not dense,
            ),
        )
        blocks.append(("categorical", categorical, list(roles.categorical)))
    for column in roles.text:
        # A str column name (not a list) hands the vectorizer the 1-D column it expects.
        # TfidfVectorizer is exactly counts then TfidfTransformer; the counts keep ties stable.
        tfidf = make_pipeline(
            FunctionTransformer(_fill_text),
            TopTermsCounts(ngram_range=(1, 2), min_df=2, max_terms=text_max_features),
            TfidfTransformer(sublinear_tf=True),
        )
        blocks.append((f"text_{column}", tfidf, column))
    return ColumnTransformer(blocks, remainder="drop", sparse_threshold=0.0 if dense else 0.3)


def preprocessing_pipeline(roles: ColumnRoles, pca: int | None = None, seed: int = 0, **options) -> Pipeline:
    """The preprocessor, optionally followed by a seeded PCA (wide pixel data)."""
    from sklearn.decomposition import PCA

    steps: list[tuple[str, object]] = [
        ("features", build_preprocessor(roles, dense=options.pop("dense", False) or pca is not None, **options))
    ]
    if pca is not None:
        steps.append(("pca", PCA(n_components=pca, random_state=seed)))
    return Pipeline(steps)
