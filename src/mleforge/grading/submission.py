"""Submission reading and validation.

Every problem the agent can cause becomes an `InvalidSubmission` whose reason
names it precisely; nothing here swallows an unexpected exception.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mleforge.errors import InvalidSubmission
from mleforge.grading.metrics import ROW_SUM_ATOL, Metric

MAX_SUBMISSION_BYTES = 1 << 30  # 1 GiB: far beyond any real submission, short of a disk filler
# MLE-bench reads CSVs with float_precision="round_trip"; from pandas 3.1 every mode uses that
# converter and the option is deprecated, so it is passed only where it still matters.
_PANDAS_VERSION = tuple(int(part) for part in pd.__version__.split(".")[:2] if part.isdigit())
_ROUND_TRIP: dict[str, str] = {} if _PANDAS_VERSION >= (3, 1) else {"float_precision": "round_trip"}
# A submission may be this many times the answers file, plus the margin: ids and
# predictions written with more digits fit easily, a bomb does not.
SIZE_FACTOR = 10
SIZE_MARGIN = 1 << 20
SCAN_CHUNK = 1 << 20


def submission_byte_limit(answers_bytes: int) -> int:
    """The largest submission read for an answers file of `answers_bytes`."""
    return min(MAX_SUBMISSION_BYTES, SIZE_FACTOR * answers_bytes + SIZE_MARGIN)


@dataclass(frozen=True)
class SubmissionBounds:
    """What is checked before pandas sees a submission, with bounded memory and time:
    its size, its header (from a bounded first line), its number of lines, the length of
    each line and the fields of each unquoted line.

    A hostile file must not cost the grading parent gigabytes or minutes: 100k columns,
    100k duplicate names (quadratic in pandas' renaming), one endless line, or a row of
    500k fields (pandas makes an index level of each extra field) are all refused from
    the bytes, not parsed. Lines break where pandas breaks them: at \\r\\n, \\r or \\n.
    Stricter than pandas by design: the header must be the first line (pandas skips blank
    lines before it), and the middle line of a quoted field that spans three lines or more is
    field-counted like any unquoted line."""

    max_bytes: int
    columns: tuple[str, ...] | None = None  # the expected header, in any order
    rows: int | None = None  # the expected number of data rows
    line_bytes: int | None = None  # the longest data line read (None: the size cap only)

    @classmethod
    def for_answers(cls, answers_path: Path, columns: tuple[str, ...] | None, rows: int | None) -> SubmissionBounds:
        line_bytes = None
        if columns is not None:
            line_bytes = LINE_FACTOR * longest_line(answers_path) + LINE_FIELD_BYTES * len(columns) + LINE_MARGIN
        return cls(submission_byte_limit(answers_path.stat().st_size), columns, rows, line_bytes)

    @property
    def max_header_bytes(self) -> int:
        """The expected header, quoted, spaced and with a BOM, fits in this with room to spare."""
        if self.columns is None:
            return min(self.max_bytes, 1 << 20)
        return 4 * len(",".join(self.columns)) + 8 * len(self.columns) + 1024

    @property
    def max_lines(self) -> int | None:
        """Newlines allowed: header + rows, doubled for blank lines and quoted newlines."""
        return None if self.rows is None else 2 * (self.rows + 1) + 16


# A data line may be this many times the answers' longest line, plus this much per
# column and a margin: predictions written with 17 digits, or k labels where the answers
# hold one, fit; a line of 500k fields does not.
LINE_FACTOR = 4
LINE_FIELD_BYTES = 64
LINE_MARGIN = 1024


def longest_line(path: Path) -> int:
    """The length of the longest line of a (small, trusted) answers file, in bytes."""
    longest, run = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(SCAN_CHUNK):
            pieces = chunk.replace(b"\r", b"\n").split(b"\n")
            if len(pieces) == 1:
                run += len(pieces[0])
                continue
            longest = max(longest, run + len(pieces[0]), *map(len, pieces[1:-1]))
            run = len(pieces[-1])
    return max(longest, run)


def check_bounds(path: Path, bounds: SubmissionBounds) -> None:
    """Refuse a submission that breaks `bounds`, reading it once in fixed chunks: a
    bounded header line, then the lines counted, measured and (unquoted ones) their
    fields counted (see SubmissionBounds)."""
    size = path.stat().st_size
    if size > bounds.max_bytes:
        raise InvalidSubmission(
            f"{path.name} is {size} bytes, over the {bounds.max_bytes}-byte limit for this task "
            f"({SIZE_FACTOR}x the answers file plus {SIZE_MARGIN >> 20} MiB); write one row per test id"
        )
    scan = _LineScan(path.name, bounds)
    with open(path, "rb") as f:
        while chunk := f.read(SCAN_CHUNK):
            scan.feed(chunk)
    scan.end()


class _LineScan:
    """The checks of `check_bounds`, fed one chunk at a time. Line breaks are normalized
    to \\n first (a \\r that ends a chunk waits for the next one: it may start a \\r\\n),
    then the chunk's breaks are counted before its lines are looked at one by one, so a
    file of a million short lines is refused in one count."""

    def __init__(self, name: str, bounds: SubmissionBounds):
        self.name, self.bounds = name, bounds
        self.lines = 0  # complete lines seen
        self.partial = bytearray()  # the line under way, never longer than its bound
        self.pending_cr = False
        self.header_fields: int | None = None  # an unquoted header's fields, where none are expected

    def feed(self, chunk: bytes) -> None:
        if self.pending_cr:
            chunk = b"\r" + chunk
        self.pending_cr = chunk.endswith(b"\r")
        if self.pending_cr:
            chunk = chunk[:-1]
        text = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if self.lines == 0:  # the header first: a wrong one is the reason to give
            head, found, text = text.partition(b"\n")
            self._grow(head)
            if not found:
                return
            self._line(bytes(self.partial))
            self.partial.clear()
        breaks = text.count(b"\n")
        limit = self.bounds.max_lines
        if limit is not None and self.lines + breaks > limit:
            raise InvalidSubmission(
                f"{self.name} has more than {limit} lines; expected a header and {self.bounds.rows} rows "
                "(one per test id)"
            )
        pieces = text.split(b"\n")
        for piece in pieces[:-1]:
            self._line(bytes(self.partial) + piece if self.partial else piece)
            self.partial.clear()
        self._grow(pieces[-1])

    def end(self) -> None:
        if self.pending_cr:
            self.pending_cr = False
            self.feed(b"\n")
        if self.partial or self.lines == 0:
            self._line(bytes(self.partial))

    def _grow(self, piece: bytes) -> None:
        if len(self.partial) + len(piece) > self._line_limit():
            self._too_long()
        self.partial += piece

    def _line_limit(self) -> int:
        if self.lines == 0:
            return self.bounds.max_header_bytes
        return self.bounds.line_bytes if self.bounds.line_bytes is not None else self.bounds.max_bytes

    def _too_long(self) -> None:
        if self.lines == 0:
            raise InvalidSubmission(
                f"the first line of {self.name} is longer than {self.bounds.max_header_bytes} bytes; "
                + (f"the header must be: {','.join(self.bounds.columns)}" if self.bounds.columns
                   else "it must be the header")
            )
        raise InvalidSubmission(
            f"line {self.lines + 1} of {self.name} is longer than {self._line_limit()} bytes; "
            f"write one row per test id with the columns {','.join(self.bounds.columns or ())}"
        )

    def _line(self, line: bytes) -> None:
        if len(line) > self._line_limit():
            self._too_long()
        columns = self.bounds.columns
        if columns is not None:
            if self.lines == 0:
                _check_header(self.name, line, columns)
            elif line.count(b",") >= len(columns) and b'"' not in line:
                raise InvalidSubmission(
                    f"line {self.lines + 1} of {self.name} has {line.count(b',') + 1} fields; "
                    f"expected {len(columns)} ({','.join(columns)})"
                )
        elif self.lines == 0:  # no expected header (an `mlebench:` task): the file's own
            self.header_fields = None if b'"' in line else line.count(b",") + 1
        elif self.header_fields is not None and b'"' not in line and line.count(b",") >= self.header_fields:
            # pandas would make an index level of each extra field (a row of 500k fields)
            raise InvalidSubmission(f"line {self.lines + 1} of {self.name} has {line.count(b',') + 1} fields; "
                                    f"its header has {self.header_fields}")
        self.lines += 1


def _check_header(name: str, first: bytes, expected: tuple[str, ...]) -> None:
    try:
        text = first.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as exc:
        raise InvalidSubmission(f"the header of {name} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        rows = list(csv.reader([text]))
    except csv.Error as exc:
        raise InvalidSubmission(f"the header of {name} is not a CSV line ({exc}); it must be: {','.join(expected)}") from None
    found = [c.strip() for c in rows[0]] if rows else []
    header = ",".join(expected)
    if len(found) != len(set(found)):
        seen: set[str] = set()
        twice = list(dict.fromkeys(c for c in found if c in seen or seen.add(c)))
        raise InvalidSubmission(f"duplicate column name(s) {_examples(twice)} in the header; it must be: {header}")
    missing = [c for c in expected if c not in found]
    extra = [c for c in found if c not in expected]
    if missing:
        raise InvalidSubmission(f"missing column(s) {', '.join(missing)}; the header must be: {header}")
    if extra:
        raise InvalidSubmission(f"unexpected column(s) {_examples(extra)}; the header must be: {header}")


def _examples(values: Any, limit: int = 3) -> str:
    items = [str(v) for v in list(values)[:limit]]
    more = len(values) - limit if hasattr(values, "__len__") else 0
    return ", ".join(items) + (f" (and {more} more)" if more > 0 else "")


def read_submission(path: str | Path, bounds: SubmissionBounds | None = None) -> pd.DataFrame:
    """Read a submission CSV, or raise `InvalidSubmission` saying why it cannot be read.
    `bounds` (the grader's, from the answers) are checked before pandas parses it.

    Whatever reading it raises (a file the script made unreadable, an error of pandas' or
    of the csv module) is the submission's: its reason names the exception."""
    path = Path(path)
    try:
        return _read_checked(path, bounds)
    except InvalidSubmission:
        raise
    except OSError as exc:
        raise InvalidSubmission(
            f"{path.name} cannot be read ({type(exc).__name__}: {exc.strerror or exc}); "
            "write a regular file the grader can read"
        ) from None
    except Exception as exc:  # pandas' and csv's own errors on malformed text
        raise InvalidSubmission(f"{path.name} is not a valid CSV ({type(exc).__name__}: {_one_line(exc)})") from None


def _read_checked(path: Path, bounds: SubmissionBounds | None) -> pd.DataFrame:
    if not path.exists():
        raise InvalidSubmission(f"no submission file at {path}; write your predictions there")
    if not path.is_file():
        raise InvalidSubmission(f"{path} is not a regular file; the submission must be a CSV file")
    if path.suffix.lower() != ".csv":
        raise InvalidSubmission(f"{path.name} is not a .csv file; the submission must be a CSV file")
    size = path.stat().st_size
    if size == 0:
        raise InvalidSubmission(f"{path.name} is empty; it needs a header and one row per test id")
    if size > MAX_SUBMISSION_BYTES:
        raise InvalidSubmission(f"{path.name} is {size} bytes, over the {MAX_SUBMISSION_BYTES}-byte limit")
    if bounds is not None:
        check_bounds(path, bounds)
    try:
        return read_csv_like_mlebench(path)
    except UnicodeDecodeError as exc:
        raise InvalidSubmission(f"{path.name} is not UTF-8 text ({exc.reason} at byte {exc.start}); write a UTF-8 CSV") from None
    except pd.errors.EmptyDataError:
        raise InvalidSubmission(f"{path.name} has no columns; it needs a header row") from None
    except pd.errors.ParserError as exc:
        raise InvalidSubmission(f"{path.name} is not a valid CSV: {str(exc).strip()}") from None


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, cut to `limit` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


def read_csv_like_mlebench(path: str | Path) -> pd.DataFrame:
    """pandas' CSV reader with MLE-bench's option: `round_trip` parses every float to the double
    that prints back as the same text (the default parser can be one unit in the last place off)."""
    return pd.read_csv(path, encoding="utf-8", **_ROUND_TRIP)


def _id_key(series: pd.Series) -> pd.Series:
    """Ids compared by value: integral numbers as ints (so 7 and 7.0 match), else as text."""
    numeric = pd.to_numeric(series, errors="coerce")
    if (numeric.notna().all() and np.all(np.isfinite(numeric)) and np.all(numeric == np.round(numeric))
            and np.all(np.abs(numeric) < 2.0**63)):
        return numeric.astype("int64").astype(str)
    # Plain str of each (a missing id is "nan", not a float left among strings).
    return pd.Series([str(v).strip() for v in series], index=series.index, dtype=object)


def check_columns(submission: pd.DataFrame, expected: tuple[str, ...]) -> None:
    columns = [str(c) for c in submission.columns]
    missing = [c for c in expected if c not in columns]
    extra = [c for c in columns if c not in expected]
    header = ",".join(expected)
    if missing:
        raise InvalidSubmission(f"missing column(s) {', '.join(missing)}; the header must be: {header}")
    if extra:
        raise InvalidSubmission(f"unexpected column(s) {', '.join(extra)}; the header must be: {header}")


def align_ids(submission: pd.DataFrame, answers: pd.DataFrame, id_column: str) -> pd.DataFrame:
    """The submission's rows reordered to the answers' id order, after checking the row count,
    duplicates and that the ids are exactly the test ids."""
    if len(submission) != len(answers):
        raise InvalidSubmission(
            f"the submission has {len(submission)} rows; expected {len(answers)} (one per test id)"
        )
    sub_ids = _id_key(submission[id_column])
    ans_ids = _id_key(answers[id_column])
    duplicated = sub_ids[sub_ids.duplicated()]
    if len(duplicated):
        raise InvalidSubmission(f"duplicate ids in column {id_column}: {_examples(duplicated.unique())}")
    missing = sorted(set(ans_ids) - set(sub_ids))
    if missing:
        unexpected = sorted(set(sub_ids) - set(ans_ids))
        raise InvalidSubmission(
            f"ids in column {id_column} do not match the test set: {len(missing)} test ids are missing "
            f"({_examples(missing)}) and {len(unexpected)} are not test ids ({_examples(unexpected)})"
        )
    position = pd.Series(np.arange(len(sub_ids)), index=sub_ids.to_numpy())
    return submission.iloc[position.loc[ans_ids.to_numpy()].to_numpy()].reset_index(drop=True)


def _missing_check(column: pd.Series, name: str, ids: pd.Series) -> None:
    missing = column.isna() | (column.astype(str).str.strip() == "")
    if missing.any():
        raise InvalidSubmission(
            f"{int(missing.sum())} predictions are missing (NaN or empty) in column {name}, "
            f"e.g. for ids {_examples(ids[missing])}"
        )


def _numeric(column: pd.Series, name: str, ids: pd.Series) -> np.ndarray:
    _missing_check(column, name, ids)
    values = pd.to_numeric(column, errors="coerce")
    bad = values.isna()
    if bad.any():
        raise InvalidSubmission(
            f"{int(bad.sum())} predictions in column {name} are not numbers, "
            f"e.g. {_examples(column[bad].astype(str).map(repr))}"
        )
    array = values.to_numpy(dtype=float)
    if not np.all(np.isfinite(array)):
        raise InvalidSubmission(f"column {name} holds infinite values; predictions must be finite numbers")
    return array


def _probabilities(column: pd.Series, name: str, ids: pd.Series) -> np.ndarray:
    array = _numeric(column, name, ids)
    out = (array < 0) | (array > 1)
    if out.any():
        raise InvalidSubmission(
            f"{int(out.sum())} probabilities in column {name} are outside [0, 1], "
            f"e.g. {_examples(array[out])}"
        )
    return array


def _rows_sum_to_one(probabilities: pd.DataFrame, ids: pd.Series) -> None:
    """MLE-bench's multiclass log-loss check: each row must sum to 1 within
    `np.isclose(..., atol=ROW_SUM_ATOL)`; rows are never rescaled."""
    sums = probabilities.astype(float).sum(axis=1).to_numpy()
    off = ~np.isclose(sums, 1, atol=ROW_SUM_ATOL)
    if off.any():
        examples = ", ".join(f"id {i} sums to {s:.6g}" for i, s in list(zip(ids[off], sums[off]))[:3])
        raise InvalidSubmission(
            f"{int(off.sum())} rows of probabilities do not sum to 1 ({examples}); each row must be a "
            "probability distribution over the classes (MLE-bench's graders refuse such rows, they "
            "never rescale them)"
        )


def _labels(pred: pd.Series, truth: pd.Series, name: str, ids: pd.Series, integer: bool) -> tuple[np.ndarray, np.ndarray]:
    _missing_check(pred, name, ids)
    if integer or pd.api.types.is_numeric_dtype(truth):
        values = _numeric(pred, name, ids)
        expected = truth.to_numpy(dtype=float)
        # Integer answers take integer labels (scikit-learn refuses a mix of classes and
        # continuous values, and takes an integer past 2^53 for a continuous one).
        if integer or np.all(expected == np.round(expected)):
            bad = (values != np.round(values)) | (np.abs(values) > 2.0**53)
            if bad.any():
                raise InvalidSubmission(
                    f"column {name} must hold integer labels like the answers (not probabilities); "
                    f"found e.g. {_examples(values[bad])}"
                )
        return expected, values
    return truth.astype(str).to_numpy(), pred.astype(str).str.strip().to_numpy()


def prepare_for_metric(
    submission: pd.DataFrame,
    answers: pd.DataFrame,
    id_column: str,
    target_columns: tuple[str, ...],
    metric: Metric,
) -> tuple[Any, Any]:
    """Validate a submission against the answers and return `(y_true, y_pred)` for `metric`."""
    check_columns(submission, (id_column, *target_columns))
    aligned = align_ids(submission, answers, id_column)
    ids = aligned[id_column]
    kind = metric.kind
    if kind == "probability" and len(target_columns) > 1:
        y_pred = np.column_stack([_probabilities(aligned[c], c, ids) for c in target_columns])
        y_true = answers[list(target_columns)].to_numpy(dtype=float)
        if metric.name == "log_loss":
            _rows_sum_to_one(aligned[list(target_columns)], ids)
        return y_true, y_pred
    (target,) = target_columns
    truth = answers[target]
    pred = aligned[target]
    if kind == "probability":
        return truth.to_numpy(dtype=float), _probabilities(pred, target, ids)
    if kind == "number":
        values = _numeric(pred, target, ids)
        # log1p is defined above -1: MLE-bench's graders (scikit-learn's RMSLE) score
        # predictions in (-1, 0) and refuse the rest.
        if metric.name == "rmsle" and (values <= -1).any():
            raise InvalidSubmission(
                f"{int((values <= -1).sum())} predictions in column {target} are <= -1; "
                "RMSLE needs predictions > -1 (it takes log(1 + x))"
            )
        return truth.to_numpy(dtype=float), values
    if kind == "label":
        return _labels(pred, truth, target, ids, integer=metric.name == "qwk")
    if kind == "ranking":
        _missing_check(pred, target, ids)
        # As MLE-bench's MAP@k graders split: on single spaces (so "a  b" holds an empty label).
        actual = [set(t.split(" ")) for t in truth.astype(str)]
        return actual, [p.split(" ") for p in pred.astype(str)]
    raise ValueError(f"unknown metric kind {kind!r}")
