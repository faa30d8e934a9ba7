"""The data overview a prompt shows, computed once per prepared task and file state: the
public files and, for train, test and sample submission, rows, columns, types and a few
values (`data_overview`); the compact profile's trimmed one (`compact_overview`)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import pandas as pd

from mleforge.agent.prompt_config import PromptConfig
from mleforge.agent.prompt_text import INPUT_DIR, file_size, value_text
from mleforge.tasks.preparation import require_prepared
from mleforge.tasks.task import Task

OVERVIEW_FILES = ("train.csv", "test.csv", "sample_submission.csv")


def data_overview(task: Task, config: PromptConfig | None = None) -> str:
    """The public files (names, sizes) and, for train, test and sample submission,
    rows, columns, types and a few values. Cached per task folder and file state."""
    return _overview(*_overview_key(task), config or PromptConfig())


def _overview_key(task: Task) -> tuple[str, tuple, tuple[str, ...]]:
    """What an overview is cached by: the public folder, its files' state, and the columns
    always described (id and target), however wide the table."""
    require_prepared(task)
    public = task.public_dir
    signature = tuple(
        sorted((e.name, e.is_dir(), e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(public))
    )
    fmt = task.spec.submission
    key_columns = tuple(dict.fromkeys(c for c in (fmt.id_column, task.spec.target, *fmt.target_columns) if c))
    return str(public), signature, key_columns


@lru_cache(maxsize=64)
def _overview(public: str, signature: tuple, key_columns: tuple[str, ...], config: PromptConfig) -> str:
    root = Path(public)
    lines = [f"Files in {INPUT_DIR}:"]
    entries = sorted(signature)
    for name, is_dir, size, _ in entries[: config.overview_files]:
        if is_dir:
            count = sum(1 for _ in os.scandir(root / name))
            lines.append(f"  {name}/  ({count} entries)")
        else:
            lines.append(f"  {name}  ({file_size(size)})")
    if len(entries) > config.overview_files:
        lines.append(f"  ... and {len(entries) - config.overview_files} more")
    for name in OVERVIEW_FILES:
        if (root / name).is_file():
            lines += ["", *_csv_overview(root / name, key_columns, config)]
    return "\n".join(lines)


def _csv_overview(path: Path, key_columns: tuple[str, ...], config: PromptConfig) -> list[str]:
    sample = pd.read_csv(path, nrows=config.overview_sample_rows)
    # One column is enough to count rows, and quoted newlines in text fields are handled.
    rows = len(pd.read_csv(path, usecols=[0])) if len(sample) == config.overview_sample_rows else len(sample)
    lines = [
        f"{path.name}: {rows} rows x {sample.shape[1]} columns "
        f"(types and examples from the first {min(rows, config.overview_sample_rows)} rows)"
    ]
    columns = [str(c) for c in sample.columns]
    keys = [c for c in columns if c in key_columns]
    others = [c for c in columns if c not in key_columns]
    chosen = set(keys[: config.overview_columns]) | set(others[: max(0, config.overview_columns - len(keys))])
    shown = [c for c in columns if c in chosen]
    width = max((len(c) for c in shown), default=0)
    for column, series in zip(columns, (sample[c] for c in sample.columns)):
        if column not in chosen:
            continue
        values = series.dropna().unique()[: config.overview_values]
        examples = ", ".join(value_text(v, config.overview_value_chars) for v in values)
        missing = int(series.isna().sum())
        note = f"  ({missing} missing)" if missing else ""
        lines.append(f"  {column:<{width}}  {series.dtype}  e.g. {examples or '-'}{note}")
    rest = [i for i, c in enumerate(columns) if c not in chosen]
    if rest:
        kinds = sample.iloc[:, rest].dtypes.astype(str).value_counts().sort_index()
        summary = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        names = [columns[i] for i in rest]
        listed = ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])}, ..., {names[-1]}"
        lines.append(f"  ... and {len(rest)} more columns ({summary}): {listed}")
    return lines


def compact_overview(task: Task, config: PromptConfig | None = None) -> str:
    """The trimmed data overview: train.csv's columns (types, a few values), test.csv and
    sample_submission.csv in a line each, and any other input files by name."""
    return _compact_overview(*_overview_key(task), config or PromptConfig.compact())


@lru_cache(maxsize=64)
def _compact_overview(public: str, signature: tuple, key_columns: tuple[str, ...], config: PromptConfig) -> str:
    root = Path(public)
    lines = [f"# Data ({INPUT_DIR})"]
    train_columns: list[str] = []
    if (root / "train.csv").is_file():
        train_lines = _csv_overview(root / "train.csv", key_columns, config)
        train_columns = [str(c) for c in pd.read_csv(root / "train.csv", nrows=0).columns]
        lines += [train_lines[0].split(" (types")[0] + ":", *train_lines[1:]]
    for name in ("test.csv", "sample_submission.csv"):
        path = root / name
        if not path.is_file():
            continue
        head = pd.read_csv(path, nrows=1)
        columns = [str(c) for c in head.columns]
        rows = len(pd.read_csv(path, usecols=[0]))
        if name == "test.csv" and train_columns and set(columns) <= set(train_columns):
            missing = [c for c in train_columns if c not in columns]
            what = f"the columns of train.csv without {', '.join(missing)}" if missing else "the columns of train.csv"
        else:
            example = ",".join(value_text(v, config.overview_value_chars).strip("'") for v in head.iloc[0]) \
                if len(head) else ""
            what = f"columns {', '.join(columns)}" + (f" (first row: {example})" if example else "")
        lines.append(f"{name}: {rows} rows; {what}")
    others = [name + ("/" if is_dir else "") for name, is_dir, _, _ in signature
              if name not in (*OVERVIEW_FILES, "description.md")]
    if others:
        shown = ", ".join(others[: config.overview_files])
        more = f" and {len(others) - config.overview_files} more" if len(others) > config.overview_files else ""
        lines.append(f"Other files: {shown}{more}")
    return "\n".join(lines)
