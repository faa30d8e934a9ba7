"""The script's features: how it assigns roles to columns (as
`mleforge.reference.features.infer_roles` does, re-derived in the script) and one
ColumnTransformer block per role (numbers, dates, one-hot categories, TF-IDF text).
"""

from __future__ import annotations

from mleforge.expert.profile import ROLES, TaskProfile
from mleforge.expert.snippets import fill
from mleforge.expert.spec import ScriptSpec
from mleforge.reference.features import TEXT_MIN_CHARS, TEXT_MIN_UNIQUE_RATIO, TEXT_MIN_WORDS

ROLES_CODE = '''
def column_roles(frame):
    """Each feature column's role: numeric, categorical, free text or ISO date."""
    roles = {"numeric": [], "categorical": [], "text": [], "date": []}
    for column in frame.columns:
        if column in (ID_COLUMN, TARGET, *TARGET_COLUMNS):
            continue
        values = frame[column]
        if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
            roles["numeric"].append(column)
            continue
        present = values.dropna().astype(str)
        if len(present) and present.str.match(r"^\\d{4}-\\d{2}-\\d{2}(?:[T ].*)?$$").all():
            roles["date"].append(column)
            continue
        chars = present.str.len().mean() if len(present) else 0.0
        words = present.str.split().str.len().mean() if len(present) else 0.0
        distinct = present.nunique() / max(len(present), 1)
        # Long or many-worded, mostly distinct strings are free text; the rest are categories.
        is_text = (chars > $CHARS or words >= $WORDS) and distinct > $UNIQUE
        roles["text" if is_text else "categorical"].append(column)$TEXT_FALLBACK$DROPS
    return roles
'''
TEXT_FALLBACK = '''
    if not roles["text"] and roles["categorical"]:
        # A text task always reads its text: the longest string column.
        longest = max(roles["categorical"], key=lambda c: frame[c].dropna().astype(str).str.len().mean())
        roles["categorical"].remove(longest)
        roles["text"].append(longest)'''
_HELPERS = {
    "categorical": '''
def as_object(frame):
    """Strings as plain objects with NaN for missing values, which every encoder accepts."""
    return frame.astype(object).where(frame.notna(), np.nan)
''',
    "text": '''
def fill_text(values):
    return ["" if pd.isna(v) else str(v) for v in values]
''',
    "date": '''
def date_parts(frame):
    """Year, month, day of week and day of year of each ISO date column (NaN if unparsable)."""
    parts = []
    for column in frame.columns:
        dates = pd.to_datetime(frame[column].astype(object), format="ISO8601", errors="coerce")
        parts += [dates.dt.year, dates.dt.month, dates.dt.day_of_week, dates.dt.day_of_year]
    return np.column_stack([np.asarray(part, dtype=float) for part in parts])
''',
}
_FEATURE_BLOCKS = {
    "numeric": '''
    if roles["numeric"]:
        numeric = make_pipeline(SimpleImputer(strategy="median")$SCALER)
        blocks.append(("numeric", numeric, roles["numeric"]))''',
    "date": '''
    if roles["date"]:
        dates = make_pipeline(FunctionTransformer(date_parts), SimpleImputer(strategy="median")$SCALER)
        blocks.append(("date", dates, roles["date"]))''',
    "categorical": '''
    if roles["categorical"]:
        categories = make_pipeline(
            FunctionTransformer(as_object),
            SimpleImputer(strategy="constant", fill_value="missing"),
            # Levels seen fewer than 10 times share one column; unseen levels encode as zeros.
            OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=10, max_categories=30,
                          sparse_output=$SPARSE),
        )
        blocks.append(("categorical", categories, roles["categorical"]))''',
    "text": '''
    for column in roles["text"]:
        # A column name (not a list) hands the vectorizer the 1-D column of strings it expects.
        words = make_pipeline(
            FunctionTransformer(fill_text),
            TfidfVectorizer(ngram_range=(1, 2), max_features=$TEXT_MAX, sublinear_tf=True, min_df=2),
        )
        blocks.append((f"text_{column}", words, column))''',
}


def roles_section(spec: ScriptSpec, profile: TaskProfile) -> str:
    """`column_roles`, with the same thresholds as infer_roles, less the roles the spec drops."""
    return fill(
        ROLES_CODE, CHARS=TEXT_MIN_CHARS, WORDS=TEXT_MIN_WORDS, UNIQUE=TEXT_MIN_UNIQUE_RATIO,
        TEXT_FALLBACK=TEXT_FALLBACK if profile.modality == "text" else "",
        DROPS="".join(f'\n    roles["{r}"] = []  # left out: a safer, smaller feature set'
                      for r in spec.drop),
    )


def roles_used(spec: ScriptSpec, profile: TaskProfile) -> list[str]:
    return [r for r in ROLES if profile.has(r) and r not in spec.drop]


def features_section(spec: ScriptSpec, profile: TaskProfile) -> str:
    scaler = {"standard": ", StandardScaler()", "minmax": ", MinMaxScaler(clip=True)", "none": ""}[spec.scale]
    used = roles_used(spec, profile) or ["numeric"]
    blocks = "".join(fill(_FEATURE_BLOCKS[r], SCALER=scaler, SPARSE=not spec.dense,
                           TEXT_MAX=spec.text_max_features) for r in used)
    helpers = "".join(_HELPERS[r] + "\n" for r in used if r in _HELPERS)
    threshold = "0.0" if spec.dense or spec.pca else "0.3"
    what = "dense" if spec.dense or spec.pca else "sparse when mostly zeros"
    return f'''{helpers}
def build_features(roles):
    """One block of columns per role; the result is {what}."""
    blocks = []{blocks}
    return ColumnTransformer(blocks, remainder="drop", sparse_threshold={threshold})
'''
