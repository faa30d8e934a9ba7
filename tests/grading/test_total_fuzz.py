"""Grading is total (issue 31), fuzzed: Hypothesis feeds malformed submissions (random
bytes, CSV-ish text with wrong headers and ids, NaN, inf, 1e308, probabilities, \\r, quotes,
huge fields, empty files) to every built-in task and to a task of every named metric, and
no report holds a grader error or a non-finite score. Bounded and derandomized: seconds,
the same examples on every run."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from mleforge.grading.grader import grade, load_answers
from mleforge.tasks.metric_names import METRIC_DIRECTIONS
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry
from tests.grading.test_total import assert_total
from tests.tasks.helpers import write_task

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

BUILTIN = ("breast-cancer", "chicago-ridership", "credit-default", "diabetes", "digits", "food-reviews",
           "hotel-rates", "house-prices", "leaf-species", "mnist-5k", "penguins", "poverty-attitudes",
           "telco-churn", "titanic")
# Every metric of the registry: the static ones and map@K (with a K of its own here).
METRICS = (*sorted(METRIC_DIRECTIONS), "map@5")

VALUES = ["0", "1", "2", "-1", "0.5", "-0.5", "0.99999", "1e-320", "nan", "NaN", "inf", "-inf", "1e200",
          "1e308", "-1e308", "1e400", "", " ", '"1"', '"0,5"', "abc", "a b c", "True", "0x10", "1_000",
          "\r", '"', '""', "é", "\x00", "9" * 3000, "1,2", "Adelie", "0 1 2 3 4 5"]
# Mostly the right header and ids, so that most examples reach the values and the metric.
HEADERS = ("right",) * 6 + ("reordered", "missing", "extra", "odd")
IDS = ("exact",) * 5 + ("shuffled", "duplicate", "missing", "extra", "text", "empty")
BREAKS = ("\n", "\r\n", "\r")


values = st.one_of(
    st.sampled_from(VALUES),
    st.floats().map(repr),  # nan, inf, 1e308, 5e-324, -0.0 ...
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(("0", "1", "0.5", "0.25", "3", "7")),
)


@st.composite
def submissions(draw, columns: tuple[str, ...], ids: list) -> bytes:
    """A submission's bytes: random bytes, or CSV-ish text from the task's header and ids
    with wrong headers, wrong ids, odd values, odd line breaks, quotes and huge fields."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=400))
    header = list(columns)
    match draw(st.sampled_from(HEADERS)):
        case "reordered":
            header = header[::-1]
        case "missing":
            header = header[:-1]
        case "extra":
            header = [*header, "extra"]
        case "odd":
            header = [draw(st.sampled_from(['"' + header[0], header[0] + "\r", "\ufeff" + header[0], ""])),
                      *header[1:]]
    rows = list(ids)
    match draw(st.sampled_from(IDS)):
        case "shuffled":
            rows = draw(st.permutations(rows))
        case "duplicate":
            rows = [*rows[:-1], rows[0]]
        case "missing":
            rows = rows[1:]
        case "extra":
            rows = [*rows, "999999"]
        case "text":
            rows = [f"id-{r}" for r in rows]
        case "empty":
            rows = []
    # Two fills, the second every `every` rows: odd values beside plausible ones.
    fills = [[draw(values) for _ in columns[1:]] for _ in range(2)]
    every = draw(st.integers(1, 7))
    lines = [",".join(header)] + [",".join([str(r), *fills[i % every == 1]]) for i, r in enumerate(rows)]
    for _ in range(draw(st.sampled_from((0, 0, 0, 1, 2, 5)))):  # a few rows altered anywhere
        if len(lines) > 1:
            at = draw(st.integers(1, len(lines) - 1))
            lines[at] = draw(st.one_of(st.sampled_from(VALUES), st.text(max_size=40)))
    return draw(st.sampled_from(BREAKS)).join(lines).encode("utf-8", "surrogatepass")


SETTINGS = hypothesis.settings(max_examples=40, deadline=None, derandomize=True, database=None,
                               suppress_health_check=list(hypothesis.HealthCheck))


def _never_raises(task, part: str) -> None:
    fmt = task.spec.submission
    ids = [str(i) for i in load_answers(task)[fmt.id_column]]
    folder = Path(tempfile.mkdtemp(prefix="mleforge-total-"))

    @SETTINGS
    @hypothesis.given(submissions((fmt.id_column, *fmt.target_columns), ids))
    def check(data: bytes) -> None:
        path = folder / "submission.csv"
        path.write_bytes(data)
        assert_total(grade(task, path, part=part))

    check()


@pytest.mark.parametrize("task_id", BUILTIN)
def test_no_submission_raises_out_of_a_builtin_task(task_id, prepared_registry):
    _never_raises(prepared_registry.get(task_id), "private")


@pytest.mark.parametrize("metric", METRICS)
def test_no_submission_raises_out_of_a_named_metric(metric, tmp_path_factory):
    root = tmp_path_factory.mktemp("metric")
    folder = write_task(root / "t", metric_lines=f"metric: {metric}")
    task = TaskRegistry(task_dirs=[folder], include_builtin=False, data_dir=root / "d", mlebench=False).get("tiny")
    prepare(task)
    _never_raises(task, "full")
