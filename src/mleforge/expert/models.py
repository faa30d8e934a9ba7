"""The script's model: the estimator's constructor call, the pipeline around it (PCA, a
transformed target for RMSLE and networks), and how predictions become the
submission's columns.
"""

from __future__ import annotations

from mleforge.expert.profile import TaskProfile
from mleforge.expert.snippets import fill
from mleforge.expert.spec import (
    N_JOBS,
    ScriptSpec,
    ScriptSpecError,
    estimator_defaults,
    estimator_path,
    uses_regressor,
)


def estimator_call(spec: ScriptSpec, profile: TaskProfile) -> tuple[str, str, str]:
    """(module, class name, constructor call) of the spec's estimator."""
    path, family_defaults = estimator_path(spec, profile)
    kwargs = {**family_defaults, **spec.kwargs}
    known = estimator_defaults(path)
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise ScriptSpecError(f"{path} takes no parameter(s) {', '.join(unknown)}")
    args = [f"{k}={v!r}" for k, v in sorted(kwargs.items())]
    if "random_state" in known:
        args.append("random_state=SEED")
    if "n_jobs" in known and spec.family in ("random_forest", "extra_trees", "knn"):
        args.append(f"n_jobs={N_JOBS}")
    module, _, name = path.partition(":")
    return module, name, f"{name}({', '.join(args)})"


_OUTPUT_CODE = {
    "label": '''
def predict_output(model, frame, y_fit):
    """Class labels, as the metric compares them."""
    return np.asarray(model.predict(frame))
''',
    "int_label": '''
def predict_output(model, frame, y_fit):
    """Integer labels, as quadratic weighted kappa compares them."""
    return np.asarray(model.predict(frame)).astype(int)
''',
    "int_label_regress": '''
def predict_output(model, frame, y_fit):
    """The regression rounded to the nearest label seen in training."""
    raw = np.asarray(model.predict(frame), dtype=float)
    return np.clip(np.rint(raw), y_fit.min(), y_fit.max()).astype(int)
''',
    "probability": '''
def predict_output(model, frame, y_fit):
    """P(positive class): the larger label (1 for 0/1 targets)."""
    proba = model.predict_proba(frame)
    positive = list(model.classes_).index(max(model.classes_))
    return $PROBABILITY
''',
    "class_probabilities": '''
def predict_output(model, frame, y_fit):
    """One probability column per class, in the submission's column order."""
    proba = model.predict_proba(frame)
    by_class = {str(c): proba[:, i] for i, c in enumerate(model.classes_)}
    # A class absent from the rows a model was fitted on gets probability zero.
    out = np.column_stack([by_class.get(c, np.zeros(len(frame))) for c in TARGET_COLUMNS])
    # Keep every class a little probable: a confident miss then costs ln(1/FLOOR), not ~34.
    out = np.clip(out, FLOOR, None)
    return out / out.sum(axis=1, keepdims=True)
''',
    "ranking": '''
def predict_output(model, frame, y_fit):
    """The K most probable labels per row, best first, separated by spaces."""
    proba = model.predict_proba(frame)
    labels = np.asarray([str(c) for c in model.classes_], dtype=object)
    order = np.argsort(-proba, axis=1, kind="stable")[:, :K]
    return np.asarray([" ".join(row) for row in labels[order]], dtype=object)
''',
    "number": '''
def predict_output(model, frame, y_fit):
    """Numeric predictions."""
    return $NUMBER
''',
}


def output_section(spec: ScriptSpec, profile: TaskProfile) -> str:
    kind = profile.output
    if kind == "int_label" and spec.regress:
        kind = "int_label_regress"
    clip_probability = profile.metric == "log_loss"
    return fill(
        _OUTPUT_CODE[kind],
        PROBABILITY="np.clip(proba[:, positive], FLOOR, 1 - FLOOR)" if clip_probability else "proba[:, positive]",
        NUMBER=("np.clip(np.asarray(model.predict(frame), dtype=float), 0.0, None)  # RMSLE needs x >= 0"
                if profile.metric == "rmsle" else "np.asarray(model.predict(frame), dtype=float)"),
    )


def _wrapped_call(prefix: str, call: str, width: int = 100) -> list[str]:
    """`prefix + call`, its arguments on a line of their own when one line would be too long."""
    if len(prefix) + len(call) <= width:
        return [prefix + call]
    name, _, args = call.partition("(")
    indent = " " * (len(prefix) - len(prefix.lstrip()))
    return [f"{prefix}{name}(", f"{indent}    {args[:-1]}", f"{indent})"]


def model_section(spec: ScriptSpec, profile: TaskProfile, call: str) -> str:
    lines = ['    steps = [("features", build_features(roles))]']
    if spec.pca:
        lines.append(f'    steps.append(("pca", PCA(n_components={spec.pca}, random_state=SEED)))')
    lines += [*_wrapped_call("    estimator = ", call), '    steps.append(("model", estimator))',
              "    model = Pipeline(steps)"]
    scale_target = uses_regressor(spec, profile) and spec.family == "mlp"
    if spec.log_target and scale_target:
        lines.append("    # Fit log1p(target), standardized: what RMSLE rewards, at a scale the network likes.")
        lines.append("    target = make_pipeline(FunctionTransformer(np.log1p, np.expm1, check_inverse=False), "
                     "StandardScaler())")
        lines.append("    return TransformedTargetRegressor(model, transformer=target)")
    elif spec.log_target:
        lines.append("    # Fit log1p(target) and invert the predictions: what RMSLE rewards.")
        lines.append("    return TransformedTargetRegressor(model, func=np.log1p, inverse_func=np.expm1, "
                     "check_inverse=False)")
    elif scale_target:
        lines.append("    # A network learns a standardized target far more easily.")
        lines.append("    return TransformedTargetRegressor(model, transformer=StandardScaler())")
    else:
        lines.append("    return model")
    body = "\n".join(lines)
    return f'''
def make_model(roles):
    """Features and model as one pipeline, fitted on raw data frames."""
{body}
'''
