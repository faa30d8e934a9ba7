"""`mlebench:` competitions graded field for field as `mlebench.grade.grade_csv` grades them.

Expected values follow MLE-bench's code (grade.py, grade_helpers.py) and are computed by hand.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from mleforge.errors import TaskSpecError
from mleforge.grading.grader import grade, no_submission_report
from mleforge.tasks.registry import TaskRegistry
from tests.tasks.mlebench_layout import forget_modules, write_competition, write_package

# Four rows, classes a and b: the answers one-hot, the submission rows sum to 1.
ANSWERS = pd.DataFrame({"id": [1, 2, 3, 4], "a": [1, 0, 1, 0], "b": [0, 1, 0, 1]})
SUBMISSION = pd.DataFrame({"id": [1, 2, 3, 4], "a": [0.8, 0.3, 0.2, 0.1], "b": [0.2, 0.7, 0.8, 0.9]})
# Probability of the true class: .8, .7, .2, .9.
LOG_LOSS = -(math.log(0.8) + math.log(0.7) + math.log(0.2) + math.log(0.9)) / 4
# Column a: positives .8, .2 against negatives .3, .1: 3 of 4 pairs; column b: .7, .9 against
# .2, .8: 3 of 4 pairs. The mean column AUC is 0.75.
MEAN_AUC = 0.75
# Spearman of each column: ranks of the answers (3.5, 1.5, 3.5, 1.5) against the submission's
# (4, 3, 2, 1) for a (and mirrored for b): covariance 2 over sqrt(4 * 5): 1/sqrt(5) both.
SPEARMAN = 1 / math.sqrt(5)
# |.8 - 1| + |.3 - 0| + |.2 - 1| + |.1 - 0| = 1.4 over 4 rows.
MEAN_ABS_A = 0.35

LOG_LOSS_GRADE = """\
import numpy as np
{pandas_import}
from sklearn.metrics import log_loss

from mlebench.competitions.utils import one_hot_dfs_to_log_loss_inputs
from mlebench.grade_helpers import InvalidSubmissionError

from .{module} import {name}


def grade(submission, answers):
    if not np.all(np.isclose(submission[{name}].sum(axis=1), 1, atol=1e-6)):
        raise InvalidSubmissionError("Each row in submission should sum to one, as probabilities.")
    return log_loss(**one_hot_dfs_to_log_loss_inputs(submission, answers, id_column="id", apply_softmax=False))
"""

# The ten competitions whose grade.py use relative or package imports, each with its real
# import block and the helper modules those imports name.
LAYOUTS = {
    "dog-breed-identification": (
        LOG_LOSS_GRADE.format(pandas_import="from pandas import DataFrame", module="dogs", name="DOGS_LIST"),
        {"dogs.py": 'DOGS_LIST = ["a", "b"]\n'}, LOG_LOSS,
    ),
    "freesound-audio-tagging-2019": (
        """\
        from pathlib import Path

        import numpy as np
        import pandas as pd
        import sklearn.metrics

        from mlebench.grade_helpers import InvalidSubmissionError

        from .vocabulary import CLASS_NAMES


        def grade(submission, answers):
            return sklearn.metrics.roc_auc_score(answers[CLASS_NAMES], submission[CLASS_NAMES], average="macro")
        """,
        {"vocabulary.py": 'CLASS_NAMES = ["a", "b"]\n'}, MEAN_AUC,
    ),
    "google-quest-challenge": (
        """\
        import numpy as np
        import pandas as pd
        from scipy.stats import spearmanr

        from mlebench.grade_helpers import InvalidSubmissionError

        from .classes import CLASSES


        def grade(submission, answers):
            return np.mean([spearmanr(answers[c], submission[c]).correlation for c in CLASSES])
        """,
        {"classes.py": 'CLASSES = ["a", "b"]\n'}, SPEARMAN,
    ),
    "hms-harmful-brain-activity-classification": (
        """\
        import pandas as pd

        from mlebench.grade_helpers import InvalidSubmissionError

        from . import kullback_leibler_divergence as kl_divergence
        from .constants import ID_COL, TARGET_COLS


        def grade(submission, answers):
            columns = [ID_COL, *TARGET_COLS]
            return kl_divergence.score(answers[columns], submission[columns], row_id_column_name=ID_COL)
        """,
        {
            "constants.py": 'ID_COL = "id"\nTARGET_COLS = ["a", "b"]\n',
            "kaggle_metric_utilities.py": "import numpy as np\n\n\ndef clipped(p):\n    return np.clip(p, 1e-15, 1)\n",
            "kullback_leibler_divergence.py": """\
                import numpy as np
                import pandas as pd

                from . import kaggle_metric_utilities


                def score(solution, submission, row_id_column_name):
                    y = solution.drop(columns=[row_id_column_name]).to_numpy(dtype=float)
                    p = kaggle_metric_utilities.clipped(submission.drop(columns=[row_id_column_name]).to_numpy(dtype=float))
                    terms = np.where(y > 0, y * np.log(np.where(y > 0, y, 1.0) / p), 0.0)
                    return float(np.mean(terms.sum(axis=1)))
                """,
        },
        LOG_LOSS,  # with one-hot answers the KL divergence is the log loss
    ),
    "jigsaw-toxic-comment-classification-challenge": (
        """\
        import pandas as pd
        from sklearn.metrics import roc_auc_score

        from mlebench.grade_helpers import InvalidSubmissionError

        from .classes import CLASSES


        def grade(submission, answers):
            missing = set(CLASSES) - set(submission.columns)
            if missing:
                raise InvalidSubmissionError(f"Submission is missing the following columns: {sorted(missing)}")
            submission = submission.set_index("id").sort_index()
            answers = answers.set_index("id").sort_index()
            return roc_auc_score(answers[CLASSES].to_numpy(), submission[CLASSES].to_numpy(), average="macro")
        """,
        {"classes.py": 'CLASSES = ["a", "b"]\n'}, MEAN_AUC,
    ),
    "kuzushiji-recognition": (
        """\
        import pandas as pd

        from mlebench.grade_helpers import InvalidSubmissionError

        from .kuzushiji_metric import kuzushiji_f1


        def grade(submission, answers):
            return kuzushiji_f1(submission["a"].round().tolist(), answers["a"].tolist())
        """,
        {"kuzushiji_metric.py": """\
            import multiprocessing

            import numpy as np
            import pandas as pd


            def kuzushiji_f1(predicted, truth):
                return float(np.mean([p == t for p, t in zip(predicted, truth)]))
            """},
        0.75,  # rounded a: 1, 0, 0, 0 against 1, 0, 1, 0
    ),
    "leaf-classification": (
        LOG_LOSS_GRADE.format(pandas_import="import pandas as pd", module="classes", name="CLASSES"),
        {"classes.py": 'CLASSES = ["a", "b"]\n'}, LOG_LOSS,
    ),
    "ranzcr-clip-catheter-line-classification": (
        """\
        import numpy as np
        import pandas as pd
        from sklearn.metrics import roc_auc_score

        from mlebench.competitions.utils import prepare_for_auroc_metric
        from mlebench.grade_helpers import InvalidSubmissionError

        from .classes import CLASSES


        def grade(submission, answers):
            return np.mean([roc_auc_score(**prepare_for_auroc_metric(submission, answers, "id", c)) for c in CLASSES])
        """,
        {"classes.py": 'CLASSES = ["a", "b"]\n'}, MEAN_AUC,
    ),
    "smartphone-decimeter-2022": (
        """\
        import numpy as np
        from pandas import DataFrame

        from mlebench.grade_helpers import InvalidSubmissionError

        from .notebook import calc_score as get_score


        def grade(submission: DataFrame, answers: DataFrame) -> float:
            return get_score(submission, answers)
        """,
        {"notebook.py": """\
            from dataclasses import dataclass

            import numpy as np

            HAVERSINE_RADIUS = 6_371_000


            def calc_score(submission, answers):
                return float(np.mean(np.abs(submission["a"].to_numpy() - answers["a"].to_numpy())))
            """},
        MEAN_ABS_A,
    ),
    "spooky-author-identification": (
        LOG_LOSS_GRADE.format(pandas_import="import pandas as pd", module="classes", name="CLASSES"),
        {"classes.py": 'CLASSES = ["a", "b"]\n'}, LOG_LOSS,
    ),
}

JIGSAW = "jigsaw-toxic-comment-classification-challenge"


@pytest.fixture
def mlebench_dirs(tmp_path, monkeypatch):
    """An mle-bench checkout's layout (the package and its competitions) plus a data dir."""
    competitions = write_package(tmp_path / "checkout")
    data = tmp_path / "data"
    monkeypatch.setenv("MLEBENCH_COMPETITIONS_DIR", str(competitions))
    monkeypatch.setenv("MLEBENCH_DATA_DIR", str(data))
    forget_modules()
    yield competitions, data
    forget_modules()


def _task(comp_id: str):
    return TaskRegistry(include_builtin=False, mlebench=True).get(f"mlebench:{comp_id}")


def _submit(tmp_path, frame: pd.DataFrame):
    path = tmp_path / "submission.csv"
    frame.to_csv(path, index=False)
    return path


def _add(dirs, comp_id, grade_py, files=None, answers=ANSWERS, scores=(0.9, 0.5, 0.1)):
    competitions, data = dirs
    sample = SUBMISSION.assign(a=0.5, b=0.5)
    return write_competition(competitions, data, comp_id, grade_py, answers, sample, list(scores), files)


@pytest.mark.parametrize("comp_id", sorted(LAYOUTS))
def test_grade_py_loads_as_a_module_of_its_package(comp_id, mlebench_dirs, tmp_path):
    grade_py, files, expected = LAYOUTS[comp_id]
    _add(mlebench_dirs, comp_id, grade_py, files)
    report = grade(_task(comp_id), _submit(tmp_path, SUBMISSION))
    assert report.invalid_reason is None and report.valid_submission
    assert report.score == round(expected, 5)
    assert report.competition_id == comp_id  # MLE-bench's bare id


def test_a_row_off_by_more_than_the_tolerance_is_invalid(mlebench_dirs, tmp_path):
    grade_py, files, _ = LAYOUTS["leaf-classification"]
    _add(mlebench_dirs, "leaf-classification", grade_py, files)
    report = grade(_task("leaf-classification"), _submit(tmp_path, SUBMISSION.assign(a=[0.8, 0.3, 0.3, 0.1])))
    assert not report.valid_submission and report.score is None
    assert report.invalid_reason == "Each row in submission should sum to one, as probabilities."


def test_extra_columns_reach_the_grader(mlebench_dirs, tmp_path):
    grade_py, files, _ = LAYOUTS[JIGSAW]
    _add(mlebench_dirs, JIGSAW, grade_py, files)
    report = grade(_task(JIGSAW), _submit(tmp_path, SUBMISSION.assign(comment_text="hello")))
    assert report.valid_submission and report.score == MEAN_AUC


def test_its_invalid_submission_error_is_invalid_with_its_message(mlebench_dirs, tmp_path):
    grade_py, files, _ = LAYOUTS[JIGSAW]
    _add(mlebench_dirs, JIGSAW, grade_py, files)
    report = grade(_task(JIGSAW), _submit(tmp_path, SUBMISSION.drop(columns=["b"])))
    assert not report.valid_submission and report.submission_exists
    assert report.invalid_reason == "Submission is missing the following columns: ['b']"


def test_any_exception_of_the_grader_makes_the_submission_invalid(mlebench_dirs, tmp_path):
    # Grader.__call__ logs any other exception and returns None: grade_csv then reports an
    # invalid submission (it raises nothing).
    _add(mlebench_dirs, "broken", "def grade(submission, answers):\n    return answers['nope'].mean()\n")
    report = grade(_task("broken"), _submit(tmp_path, SUBMISSION))
    assert not report.valid_submission and report.score is None and not report.any_medal
    assert report.invalid_reason.startswith("the competition's grade function raised KeyError: 'nope'")


def test_a_nan_score_is_valid_and_earns_nothing(mlebench_dirs, tmp_path):
    # round(nan, 5) is nan, and valid_submission is `score is not None`: valid. Every
    # comparison with nan is false: no medal, not above the median.
    _add(mlebench_dirs, "nan", "def grade(submission, answers):\n    return float('nan')\n")
    report = grade(_task("nan"), _submit(tmp_path, SUBMISSION))
    assert report.valid_submission and math.isnan(report.score)
    assert not (report.gold_medal or report.silver_medal or report.bronze_medal or report.above_median)
    assert report.normalized_score is None and report.invalid_reason is None


def test_jsonl_answers_reach_the_grader_as_a_list_of_dicts(mlebench_dirs, tmp_path):
    answers = [{"id": 1, "a": 1}, {"id": 2, "a": 0}, {"id": 3, "a": 1}, {"id": 4, "a": 0}]
    _add(mlebench_dirs, "jsonl", """\
        def grade(submission, answers):
            truth = {row["id"]: row["a"] for row in answers}
            hits = [round(a) == truth[i] for i, a in zip(submission["id"], submission["a"])]
            return sum(hits) / len(hits)
        """, answers=answers)
    report = grade(_task("jsonl"), _submit(tmp_path, SUBMISSION))
    assert report.score == 0.75  # rounded a: 1, 0, 0, 0 against 1, 0, 1, 0


def test_a_leaderboard_of_ties_is_higher_is_better(mlebench_dirs, tmp_path):
    # is_lower_better: top < bottom, false for ties. With 3 entries every threshold is
    # position 1 (0.5); a score of 0.5 is gold (>=) and not above the median (strict).
    _add(mlebench_dirs, "ties", "def grade(submission, answers):\n    return float(submission['a'].iloc[0])\n",
         scores=(0.5, 0.5, 0.5))
    task = _task("ties")
    assert not task.is_lower_better
    tied = grade(task, _submit(tmp_path, SUBMISSION.assign(a=0.5)))
    assert tied.gold_medal and not tied.above_median and not tied.is_lower_better
    lower = grade(task, _submit(tmp_path, SUBMISSION.assign(a=0.4)))
    assert not lower.any_medal and not lower.above_median


def test_thresholds_are_read_at_positions_of_the_file_as_it_stands(mlebench_dirs, tmp_path):
    # Five teams, first 0.9 > last 0.8: higher is better. Positions: gold max(1, int(0.5)) = 1,
    # silver max(1, int(1.0)) = 1, bronze max(1, int(2.0)) = 2: the file's 2nd score, 0.5
    # (sorted, it would be 0.8). Median of all five: 0.7.
    _add(mlebench_dirs, "unsorted", "def grade(submission, answers):\n    return float(submission['a'].iloc[0])\n",
         scores=(0.9, 0.5, 0.7, 0.6, 0.8))
    report = grade(_task("unsorted"), _submit(tmp_path, SUBMISSION.assign(a=0.6)))
    assert (report.gold_threshold, report.silver_threshold, report.bronze_threshold) == (0.9, 0.9, 0.5)
    assert report.median_threshold == 0.7
    assert report.bronze_medal and not report.above_median


def test_without_the_package_a_self_contained_grader_still_loads(tmp_path, monkeypatch):
    competitions, data = tmp_path / "competitions", tmp_path / "data"  # no mlebench package above
    monkeypatch.setenv("MLEBENCH_COMPETITIONS_DIR", str(competitions))
    monkeypatch.setenv("MLEBENCH_DATA_DIR", str(data))
    forget_modules()
    try:
        sample = SUBMISSION.assign(a=0.5, b=0.5)
        write_competition(competitions, data, "plain", "from .helper import value\n\n\ndef grade(s, a):\n    return value\n",
                          ANSWERS, sample, [0.9, 0.1], {"helper.py": "value = 0.25\n"})
        assert grade(_task("plain"), _submit(tmp_path, SUBMISSION)).score == 0.25
        write_competition(competitions, data, "needs-mlebench",
                          "from mlebench.grade_helpers import InvalidSubmissionError\n\n\ndef grade(s, a):\n    return 1.0\n",
                          ANSWERS, sample, [0.9, 0.1])
        with pytest.raises(TaskSpecError, match=r"imports mlebench.*pip install 'mleforge\[mlebench\]'"):
            grade(_task("needs-mlebench"), _submit(tmp_path, SUBMISSION))
    finally:
        forget_modules()


def test_two_copies_of_a_competition_in_one_process(mlebench_dirs, tmp_path, monkeypatch):
    """Each task grades with the grade.py of its own folder, not the first one imported."""
    _add(mlebench_dirs, "twin", "from .helper import value\n\n\ndef grade(s, a):\n    return value\n",
         files={"helper.py": "value = 0.25\n"})
    first = _task("twin")
    assert grade(first, _submit(tmp_path, SUBMISSION)).score == 0.25
    other = write_package(tmp_path / "other")
    write_competition(other, tmp_path / "other-data", "twin", "from .helper import value\n\n\ndef grade(s, a):\n    return value\n",
                      ANSWERS, SUBMISSION.assign(a=0.5, b=0.5), [0.9, 0.1], {"helper.py": "value = 0.75\n"})
    monkeypatch.setenv("MLEBENCH_COMPETITIONS_DIR", str(other))
    monkeypatch.setenv("MLEBENCH_DATA_DIR", str(tmp_path / "other-data"))
    assert grade(_task("twin"), _submit(tmp_path, SUBMISSION)).score == 0.75
    assert grade(first, _submit(tmp_path, SUBMISSION)).score == 0.25  # its function keeps its module


def test_a_run_without_a_submission_reports_the_bare_id_and_the_file_thresholds(mlebench_dirs, tmp_path):
    _add(mlebench_dirs, "unsorted", "def grade(submission, answers):\n    return 1.0\n", scores=(0.9, 0.5, 0.7, 0.6, 0.8))
    report = no_submission_report(_task("unsorted"), tmp_path / "none.csv", "no step produced a submission")
    assert report.competition_id == "unsorted" and report.bronze_threshold == 0.5
    assert not report.submission_exists and not report.valid_submission and not report.any_medal
    assert report.invalid_reason == "no step produced a submission"


def test_final_grade_is_mlebench_s_full_grade_and_the_public_part_a_seeded_subset(mlebench_dirs, tmp_path):
    """The grade function reports which answer rows it got (their ids as digits) and refuses a
    submission whose ids are not those rows."""
    import hashlib

    _add(mlebench_dirs, "parts", "def grade(s, a):\n"
         "    assert sorted(s['id']) == sorted(a['id']), 'rows cut differently'\n"
         "    return float(''.join(str(i) for i in sorted(a['id'])))\n")
    report = grade(_task("parts"), _submit(tmp_path, SUBMISSION))
    assert (report.score, report.part, report.competition_id) == (1234.0, "full", "parts")
    # round(0.3 * 4) = 1 public row: the id with the lowest sha256 of ("mlebench:parts", id).
    public_id = min([1, 2, 3, 4], key=lambda i: hashlib.sha256(f"mlebench:parts\0{i}".encode()).digest()[:8])
    assert report.public_score == float(public_id)
    public = grade(_task("parts"), _submit(tmp_path, SUBMISSION), part="public")
    assert (public.score, public.part) == (float(public_id), "public")
