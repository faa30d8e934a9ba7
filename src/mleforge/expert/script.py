"""Standalone solution scripts from a task profile and an approach spec.

`render_script(spec, profile, idea)` joins the parts (features.py, models.py,
metrics.py) with the imports, constants, validation and main function into one
Python file that runs in the sandbox with only numpy, pandas, scikit-learn and
scipy: it reads `input/`, prints a validation score computed with the task's
metric (written inline), refits on all training rows and writes
`submission/submission.csv` in the task's exact format.
"""

from __future__ import annotations

import json

from mleforge.expert.features import features_section, roles_section, roles_used
from mleforge.expert.metrics import metric_section
from mleforge.expert.models import estimator_call, model_section, output_section
from mleforge.expert.profile import TaskProfile
from mleforge.expert.snippets import fill
from mleforge.expert.spec import FOLDS, HOLDOUT, ScriptSpec, uses_regressor
from mleforge.reference.solutions import PROBABILITY_FLOOR

_VALIDATION_CODE = {
    "holdout": '''
def validate(train, y, roles):
    """Fit on 80% of the training rows and score the other 20% with the task's metric."""
    stratify = $STRATIFY
    fit_rows, held_rows = train_test_split(
        np.arange(len(train)), test_size=$HOLDOUT, random_state=SEED, stratify=stratify
    )
    model = make_model(roles).fit(train.iloc[fit_rows], y.iloc[fit_rows])
    value = score(y.iloc[held_rows], predict_output(model, train.iloc[held_rows], y.iloc[fit_rows]))
    print(f"holdout {METRIC}: {value:.5f} (fit on {len(fit_rows)} rows, scored on {len(held_rows)})")
    return value
''',
    "kfold": '''
def validate(train, y, roles):
    """$FOLDS-fold cross-validation with the task's metric: mean and spread over the folds."""
    folds = $SPLITTER
    scores = []
    for fold, (fit_rows, held_rows) in enumerate(folds.split(train, y), start=1):
        model = make_model(roles).fit(train.iloc[fit_rows], y.iloc[fit_rows])
        scores.append(score(y.iloc[held_rows], predict_output(model, train.iloc[held_rows], y.iloc[fit_rows])))
        print(f"fold {fold}: {METRIC} {scores[-1]:.5f}")
    print(f"{FOLDS}-fold CV {METRIC}: {np.mean(scores):.5f} +/- {np.std(scores):.5f}")
    return float(np.mean(scores))
''',
}
_MAIN_CODE = '''
def main():
    train = pd.read_csv("input/train.csv")
    test = pd.read_csv("input/test.csv")
    columns = list(pd.read_csv("input/sample_submission.csv", nrows=0).columns)
    y = train[TARGET]
    roles = column_roles(train)
    print("feature columns by role:", {role: len(names) for role, names in roles.items()})
    validate(train, y, roles)

    # The final model sees every training row.
    model = make_model(roles).fit(train, y)
    values = predict_output(model, test, y)
    submission = pd.DataFrame({ID_COLUMN: test[ID_COLUMN].to_numpy()})
    for i, column in enumerate(TARGET_COLUMNS):
        submission[column] = values[:, i] if values.ndim == 2 else values
    os.makedirs("submission", exist_ok=True)
    submission[columns].to_csv("submission/submission.csv", index=False)
    print(f"wrote submission/submission.csv: {len(submission)} rows, columns {columns}")


if __name__ == "__main__":
    main()
'''


def validation_section(spec: ScriptSpec, profile: TaskProfile) -> str:
    classes = profile.classification
    stratify = "y if y.value_counts().min() >= 2 else None" if classes else "None"
    splitter = (
        "(StratifiedKFold if y.value_counts().min() >= FOLDS else KFold)(\n"
        "        n_splits=FOLDS, shuffle=True, random_state=SEED\n    )"
        if classes else "KFold(n_splits=FOLDS, shuffle=True, random_state=SEED)"
    )
    return fill(_VALIDATION_CODE[spec.validation], STRATIFY=stratify, HOLDOUT=HOLDOUT,
                 FOLDS=FOLDS, SPLITTER=splitter)


def _needed_imports(spec: ScriptSpec, profile: TaskProfile, module: str, name: str) -> dict[str, set[str]]:
    used = roles_used(spec, profile) or ["numeric"]
    need: dict[str, set[str]] = {
        "sklearn.compose": {"ColumnTransformer"},
        "sklearn.exceptions": {"ConvergenceWarning"},
        "sklearn.impute": {"SimpleImputer"},
        "sklearn.pipeline": {"Pipeline", "make_pipeline"},
        module: {name},
    }

    def add(mod: str, *names: str) -> None:
        need.setdefault(mod, set()).update(names)

    scaler = {"standard": "StandardScaler", "minmax": "MinMaxScaler"}.get(spec.scale)
    if scaler and ("numeric" in used or "date" in used):
        add("sklearn.preprocessing", scaler)
    if {"date", "categorical", "text"} & set(used):
        add("sklearn.preprocessing", "FunctionTransformer")
    if "categorical" in used:
        add("sklearn.preprocessing", "OneHotEncoder")
    if "text" in used:
        add("sklearn.feature_extraction.text", "TfidfVectorizer")
    if spec.pca:
        add("sklearn.decomposition", "PCA")
    scale_target = uses_regressor(spec, profile) and spec.family == "mlp"
    if spec.log_target or scale_target:
        add("sklearn.compose", "TransformedTargetRegressor")
    if scale_target:
        add("sklearn.preprocessing", "StandardScaler")
        if spec.log_target:
            add("sklearn.preprocessing", "FunctionTransformer")
    if spec.validation == "holdout":
        add("sklearn.model_selection", "train_test_split")
    else:
        add("sklearn.model_selection", "KFold", *(("StratifiedKFold",) if profile.classification else ()))
    if profile.metric == "roc_auc":
        add("scipy.stats", "rankdata")
    return need


def _imports_section(need: dict[str, set[str]]) -> str:
    # Thread counts and OMP_WAIT_POLICY=PASSIVE are the sandbox's to set (mleforge.sandbox.env):
    # setting them here cost 128-144 prompt tokens of every improve state that showed the script.
    third_party = [f"from {m} import {', '.join(sorted(need[m]))}" for m in sorted(need)]
    return "\n".join([
        "import os",
        "import warnings",
        "",
        "import numpy as np",
        "import pandas as pd",
        *third_party,
    ])


def _constants_section(spec: ScriptSpec, profile: TaskProfile, metric_name: str) -> str:
    lines = [
        f"SEED = {spec.seed}",
        # JSON strings and lists of strings are Python literals too (with double quotes).
        f"TARGET = {json.dumps(profile.target)}",
        f"ID_COLUMN = {json.dumps(profile.id_column)}",
        f"TARGET_COLUMNS = {json.dumps(list(profile.target_columns))}",
        f"METRIC = {json.dumps(metric_name)}",
    ]
    if spec.validation == "kfold":
        lines.append(f"FOLDS = {FOLDS}")
    if profile.output in ("class_probabilities", "probability") and profile.metric == "log_loss":
        lines.append(f"FLOOR = {PROBABILITY_FLOOR!r}  # the least probability any class gets")
    if profile.output == "ranking" or (profile.metric or "").startswith("map@"):
        lines.append(f"K = {profile.k or 3}  # guesses per row")
    lines += [
        "",
        "# Iteration caps are deliberate (a bounded run time); unseen categories are expected.",
        'warnings.filterwarnings("ignore", category=ConvergenceWarning)',
        'warnings.filterwarnings("ignore", category=UserWarning, module="sklearn")',
    ]
    return "\n".join(lines)


def render_script(spec: ScriptSpec, profile: TaskProfile, idea: str) -> str:
    """The complete standalone script that implements `spec` on the profiled task."""
    module, name, call = estimator_call(spec, profile)
    metric_name, metric_code = metric_section(profile)
    header = "\n".join([
        spec.header(),
        f"# Idea: {idea}",
        f"# Task: {profile.name} ({profile.task_id}); metric: {metric_name}.",
    ])
    sections = [
        header + "\n" + _imports_section(_needed_imports(spec, profile, module, name)),
        _constants_section(spec, profile, metric_name),
        metric_code.strip("\n"),
        roles_section(spec, profile).strip("\n"),
        features_section(spec, profile).strip("\n"),
        model_section(spec, profile, call).strip("\n"),
        output_section(spec, profile).strip("\n"),
        validation_section(spec, profile).strip("\n"),
        _MAIN_CODE.strip("\n"),
    ]
    return "\n\n\n".join(sections) + "\n"
