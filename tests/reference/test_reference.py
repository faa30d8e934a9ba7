"""Reference solutions, their features and the built-in leaderboards they make."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from mleforge.errors import ConfigError
from mleforge.reference import board as rb
from mleforge.reference import leaderboard as lb
from mleforge.reference.features import (
    ColumnRoles,
    TopTermsCounts,
    build_preprocessor,
    date_parts,
    infer_roles,
)
from mleforge.reference.numerics import can_pin
from mleforge.reference.solutions import ReferenceSolution, pick_solution, solution_grid
from mleforge.tasks.preparation import prepare, read_public
from mleforge.tasks.registry import BUILTIN_DIR, TaskRegistry
from mleforge.tasks.spec import load_task_spec

BUILTIN_IDS = sorted(load_task_spec(p.parent).id for p in BUILTIN_DIR.glob("*/task.yaml"))
# Leaderboards slow to rebuild (`python benchmarks/prepare_and_grade.py` times each build).
SLOW = {"chicago-ridership", "food-reviews", "hotel-rates", "house-prices", "leaf-species", "mnist-5k", "titanic"}
# The slow boards (SAMPLED) are checked on this many entries spread over their ranks (best, worst and
# evenly between: `mleforge tasks leaderboard --check --sample 8`); the rest in full.
SLOW_SAMPLE = 8
# Boards not marked slow whose full rebuild still takes over 10 s on two cores: sampled too.
SAMPLED = SLOW | {"digits", "poverty-attitudes", "telco-churn"}


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    root = tmp_path / "data"
    monkeypatch.setenv("MLEFORGE_DATA", str(root))
    return root


def _builtin(task_id: str, data_dir) -> object:
    task = TaskRegistry(data_dir=data_dir, mlebench=False).get(task_id)
    prepare(task)
    return task


@pytest.fixture(scope="module")
def rebuilt(request, tmp_path_factory):
    """The rebuild of every leaderboard this session selected, started at once and two at a
    time: each build runs single-threaded in a child process of its own (the pinned
    environment), so on two cores the rebuilds take about half as long as one after another."""
    wanted = dict.fromkeys(item.callspec.params["task_id"] for item in request.session.items
                           if getattr(item, "originalname", None) == "test_committed_leaderboard_rebuilds")
    data_dir = tmp_path_factory.mktemp("rebuilt") / "data"
    pool = ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1)), thread_name_prefix="rebuild")
    futures = {task_id: pool.submit(lambda t: lb.check_leaderboard(_builtin(t, data_dir),
                                                                   sample=SLOW_SAMPLE if t in SAMPLED else None), task_id)
               for task_id in wanted}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize(
    "task_id", [pytest.param(t, marks=pytest.mark.slow) if t in SLOW else t for t in BUILTIN_IDS]
)
def test_committed_leaderboard_rebuilds(task_id, rebuilt):
    # The build grades every entry with score_frame, which raises on an invalid submission:
    # an empty list also says that every entry of the grid is valid.
    assert rebuilt[task_id].result() == []


@pytest.mark.parametrize("task_id", BUILTIN_IDS)
def test_grid_is_large_distinct_and_has_a_baseline(task_id, data_dir):
    grid = solution_grid(_builtin(task_id, data_dir))
    names = [s.name for s in grid]
    assert len(grid) >= 20
    assert len(set(names)) == len(names)
    assert any(s.family == "constant" for s in grid)
    families = {s.family for s in grid}
    assert {"linear", "knn", "tree", "random_forest", "extra_trees", "hist_gb"} <= families


@pytest.mark.parametrize("task_id", BUILTIN_IDS)
def test_committed_leaderboard_is_well_formed(task_id, data_dir):
    task = TaskRegistry(data_dir=data_dir, mlebench=False).get(task_id)
    board = task.leaderboard()
    assert list(board.columns) == ["entry", "score"]
    assert board["entry"].is_unique
    assert lb.render_board(board) == task.spec.leaderboard_path.read_text(encoding="utf-8")
    assert board.equals(rb.sort_board(board, task.is_lower_better))
    meta = pd.read_json(lb.meta_path(task), typ="series")
    assert meta["entries"] == len(board)
    assert meta["command"] == f"mleforge tasks leaderboard {task_id}"


def test_seeded_solution_is_deterministic_and_seed_matters(data_dir):
    task = _builtin("breast-cancer", data_dir)
    train, test = read_public(task)
    first = ReferenceSolution("rf", "random_forest", {"n_estimators": 30}, seed=1)
    pd.testing.assert_frame_equal(first.fit_predict(task, train, test), first.fit_predict(task, train, test))
    other = ReferenceSolution("rf", "random_forest", {"n_estimators": 30}, seed=2)
    assert not first.fit_predict(task, train, test).equals(other.fit_predict(task, train, test))


def test_submission_format_per_metric(data_dir):
    mnist = _builtin("leaf-species", data_dir)
    train, test = read_public(mnist)
    ranked = ReferenceSolution("prior", "constant", {"strategy": "prior"}).fit_predict(mnist, train, test)
    assert list(ranked.columns) == ["id", "species"]
    assert ranked["id"].tolist() == test["id"].tolist()
    top3 = ranked["species"].iloc[0].split()
    counts = train["species"].value_counts()
    assert top3 == sorted(counts.index, key=lambda s: (-counts[s], s))[:3]


def test_ordinal_regressor_predicts_labels_in_range(data_dir):
    task = _builtin("poverty-attitudes", data_dir)
    train, test = read_public(task)
    solution = ReferenceSolution("ridge", "linear", {"alpha": 1.0, "regress": True})
    labels = solution.fit_predict(task, train, test)["poverty"]
    assert labels.dtype.kind == "i"
    assert set(labels) <= set(train["poverty"])


def test_reference_solution_round_trips_and_rejects_unknown_family():
    solution = ReferenceSolution("hgb", "hist_gb", {"learning_rate": 0.1, "pca": 50}, seed=3)
    assert ReferenceSolution.from_dict(solution.to_dict()) == solution
    with pytest.raises(ConfigError, match="unknown solution family"):
        ReferenceSolution("x", "xgboost", {})


def test_pick_solution(data_dir):
    task = _builtin("penguins", data_dir)
    assert pick_solution(task).name == task.leaderboard()["entry"].iloc[0]
    assert pick_solution(task, "tree-d2").family == "tree"
    with pytest.raises(ConfigError, match="no reference solution"):
        pick_solution(task, "nope")


# --- features ---------------------------------------------------------------------------------


def _frame() -> pd.DataFrame:
    words = ["good tasty snack for the price", "bland and stale, would not buy again", "my dog loves it"]
    return pd.DataFrame({
        "id": range(1, 61),
        "n": [float(i) if i % 7 else np.nan for i in range(60)],
        "flag": [i % 2 == 0 for i in range(60)],
        "color": (["red", "blue", "green", None] * 15),
        "review": [f"{words[i % 3]} number {i}" for i in range(60)],
        "when": [f"2020-{1 + i % 12:02d}-{1 + i % 28:02d}" for i in range(60)],
        "y": [i % 2 for i in range(60)],
    })


def test_infer_roles(data_dir):
    spec = _builtin("penguins", data_dir).spec
    roles = infer_roles(spec, _frame().rename(columns={"y": "species"}))
    assert roles == ColumnRoles(numeric=("n", "flag"), categorical=("color",), text=("review",), date=("when",))


def test_preprocessor_handles_unknown_categories_and_missing_values():
    roles = ColumnRoles(numeric=("n", "flag"), categorical=("color",), text=("review",), date=("when",))
    frame = _frame()
    out = build_preprocessor(roles, dense=True, min_frequency=1).fit(frame).transform(
        frame.assign(color="purple", n=np.nan, when="not a date")
    )
    assert np.isfinite(out).all()
    assert out.shape[0] == len(frame)


def test_top_terms_break_count_ties_alphabetically():
    from sklearn.feature_extraction.text import CountVectorizer

    texts = ["bb aa", "aa cc", "cc dd"]  # counts: aa 2, bb 1, cc 2, dd 1

    def kept(n):
        return TopTermsCounts(ngram_range=(1, 1), min_df=1, max_terms=n).fit(texts).get_feature_names_out().tolist()
    assert kept(1) == ["aa"]  # aa and cc tie at 2: the first in vocabulary order
    assert kept(3) == ["aa", "bb", "cc"]  # bb and dd tie at 1
    assert kept(2) == ["aa", "cc"] and kept(None) == ["aa", "bb", "cc", "dd"]
    counts = TopTermsCounts(ngram_range=(1, 1), min_df=1, max_terms=2).fit(texts).transform(["cc cc aa", "dd"])
    assert counts.toarray().tolist() == [[1, 2], [0, 0]]
    # Without a tie at the cut it keeps what CountVectorizer(max_features=...) keeps.
    assert kept(2) == CountVectorizer(max_features=2).fit(texts).get_feature_names_out().tolist()


def test_top_terms_then_tfidf_is_tfidf_vectorizer_to_the_bit():
    # Float64 counts, as TfidfVectorizer counts: int64 counts would differ in the last bit
    # after fit_transform, and that flipped a nearest-neighbour tie on titanic.
    from sklearn.feature_extraction.text import TfidfTransformer, TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    docs = ["the cat sat", "the dog sat down", "a cat and a dog", "the end of the cat", "dog dog dog"]
    ours = make_pipeline(TopTermsCounts(min_df=1), TfidfTransformer(sublinear_tf=True))
    theirs = TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True)
    assert (ours.fit_transform(docs) != theirs.fit_transform(docs)).nnz == 0
    assert (ours.transform(["the dog sat", "cat"]) != theirs.transform(["the dog sat", "cat"])).nnz == 0


def test_date_parts():
    parts = date_parts(pd.DataFrame({"d": ["2024-03-01", None]}))
    assert parts[0].tolist() == [2024.0, 3.0, 4.0, 61.0]  # a Friday, day 61 of a leap year
    assert np.isnan(parts[1]).all()


# --- leaderboard files ------------------------------------------------------------------------


def test_sort_board_breaks_ties_by_name():
    board = pd.DataFrame({"entry": ["c", "a", "b", "d"], "score": [0.5, 0.5, 0.9, 0.1]})
    assert rb.sort_board(board, is_lower_better=False)["entry"].tolist() == ["b", "a", "c", "d"]
    assert rb.sort_board(board, is_lower_better=True)["entry"].tolist() == ["d", "a", "c", "b"]


def test_compare_boards_exact_and_tolerant():
    old = pd.DataFrame({"entry": ["a", "b", "c"], "score": [0.9, 0.8, 0.7]})
    new = pd.DataFrame({"entry": ["a", "b", "d"], "score": [0.9, 0.801, 0.6]})
    exact = lb.compare_boards(old, new, exact=True)
    assert exact == [
        "entry c is missing from the rebuild",
        "entry d is new in the rebuild",
        "entry b: committed 0.80000, rebuilt 0.80100",
    ]
    assert lb.compare_boards(old, new, exact=False, tolerance=lambda s: 0.001) == exact[:2]
    assert lb.compare_boards(old, new, exact=False, tolerance=lambda s: 0.0009)[2] == (
        "entry b: committed 0.80000, rebuilt 0.80100 (off by 0.00100, over the tolerance 0.00090)")


def test_score_tolerance_in_test_rows_or_relative(tmp_path):
    from tests.tasks.helpers import write_task

    def task(metric, _count=[0]):  # noqa: B006  (a fresh folder per call)
        _count[0] += 1
        folder = write_task(tmp_path / str(_count[0]), metric_lines=f"metric: {metric}")
        return TaskRegistry([folder], include_builtin=False, data_dir=tmp_path / "d", mlebench=False).get("tiny")

    # Accuracy-like: 2 rows of 262 = 0.00763, whatever the score.
    assert lb.score_tolerance(task("accuracy"), test_rows=262)(0.5) == pytest.approx(2 / 262)
    assert lb.score_tolerance(task("map@3"), test_rows=262)(0.9) == pytest.approx(2 / 262)
    # Others: 1e-3 of the score (0.85 -> 0.00085), never under one unit of the 5th decimal.
    auc = lb.score_tolerance(task("roc_auc"))
    assert auc(0.85) == pytest.approx(0.00085) and auc(0.001) == 1e-5
    assert lb.score_tolerance(task("accuracy"), test_rows=10**6)(0.5) == 1e-5


def test_pinned_environment_reaches_the_child():
    """OpenBLAS on its Haswell kernels, numpy without its AVX-512 ones, one thread."""
    import json
    import subprocess
    import sys

    from mleforge.reference import numerics

    if not numerics.can_pin():
        pytest.skip("this CPU has no AVX2/FMA: builds run unpinned and compare within a tolerance")
    env = numerics.pinned_environment()
    dispatch, _ = numerics._numpy_cpu()
    above_v3 = [t for t in dispatch if t.startswith("AVX512") or t == "X86_V4"]
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["OMP_NUM_THREADS"] == "1"
    assert env["NPY_DISABLE_CPU_FEATURES"].split() == above_v3
    out = subprocess.run([sys.executable, "-c", "import json; from mleforge.reference.numerics import numerics; "
                          "print(json.dumps(numerics()))"], env=env, capture_output=True, text=True, check=True)
    child = json.loads(out.stdout)
    assert child["pin"] == "x86-64-v3"
    assert child["blas"] and all(b.endswith(" Haswell") for b in child["blas"])
    assert not set(child["numpy_simd"]) & set(above_v3)
    assert numerics.numerics()["pin"] is None  # this process was not started pinned


def test_write_and_check_leaderboard(tmp_path, data_dir, monkeypatch):
    # A copy of a built-in task, so the package's own files stay untouched. A monkeypatched
    # grid reaches only a build in this process (pinned=False).
    folder = tmp_path / "tasks" / "penguins"
    shutil.copytree(BUILTIN_DIR / "penguins", folder, ignore=shutil.ignore_patterns("leaderboard*"))
    task = TaskRegistry([folder], include_builtin=False, data_dir=data_dir, mlebench=False).get("penguins")
    assert lb.check_leaderboard(task, pinned=False)[0] == (
        f"no committed leaderboard at {folder / 'leaderboard.csv'}; build it with: "
        f"mleforge tasks leaderboard penguins --tasks-dir {folder}")
    small = [ReferenceSolution("constant-prior", "constant", {"strategy": "prior"}),
             ReferenceSolution("tree-d2", "tree", {"max_depth": 2})]
    monkeypatch.setattr(rb, "solution_grid", lambda task: small)
    seen = []
    board = lb.build_leaderboard(task, progress=lambda done, total, name: seen.append((done, total, name)),
                                 pinned=False)
    assert seen == [(1, 2, "constant-prior"), (2, 2, "tree-d2")]
    assert board["entry"].tolist() == ["tree-d2", "constant-prior"]
    lb.write_leaderboard(task, board)
    meta = lb.read_meta(task)
    assert meta["command"] == f"mleforge tasks leaderboard penguins --tasks-dir {folder}"
    assert meta["numerics"] == board.attrs["numerics"] and set(meta["numerics"]) == {"pin", "blas", "numpy_simd"}
    assert {"machine", "model", "features"} <= set(meta["cpu"])
    assert lb.check_leaderboard(task, pinned=False) == []
    lines = task.spec.leaderboard_path.read_text().splitlines()
    task.spec.leaderboard_path.write_text("\n".join([lines[0], lines[1].replace("0.", "0.0"), lines[2]]) + "\n")
    assert lb.check_leaderboard(task, pinned=False)[0].startswith("entry tree-d2: committed")


def test_spread_entries_takes_the_best_the_worst_and_evenly_between():
    board = pd.DataFrame({"entry": [f"e{i}" for i in range(10)], "score": np.linspace(1, 0, 10)})
    assert lb.spread_entries(board, 4) == ["e0", "e3", "e6", "e9"]  # ranks 0, 3, 6, 9 of 0..9
    assert lb.spread_entries(board, 3) == ["e0", "e4", "e9"]  # round(4.5) = 4 (to even)
    assert lb.spread_entries(board, 1) == ["e0"]
    assert lb.spread_entries(board, 12) == board["entry"].tolist()
    with pytest.raises(ConfigError, match="at least 1 entry, got 0"):
        lb.spread_entries(board, 0)


def test_a_sampled_check_rebuilds_only_the_sample(tmp_path, data_dir, monkeypatch):
    folder = tmp_path / "tasks" / "penguins"
    shutil.copytree(BUILTIN_DIR / "penguins", folder, ignore=shutil.ignore_patterns("leaderboard*"))
    task = TaskRegistry([folder], include_builtin=False, data_dir=data_dir, mlebench=False).get("penguins")
    small = [ReferenceSolution("constant-prior", "constant", {"strategy": "prior"}),
             ReferenceSolution("tree-d1", "tree", {"max_depth": 1}),
             ReferenceSolution("tree-d2", "tree", {"max_depth": 2})]
    monkeypatch.setattr(rb, "solution_grid", lambda task: small)
    lb.write_leaderboard(task, lb.build_leaderboard(task, pinned=False))
    committed = task.leaderboard()["entry"].tolist()
    seen = []
    assert lb.check_leaderboard(task, progress=lambda d, t, name: seen.append(name), pinned=False, sample=2) == []
    assert sorted(seen) == sorted([committed[0], committed[-1]])  # the middle entry was not built
    # A changed score of a sampled entry is found; one of an entry left out is not looked at.
    lines = task.spec.leaderboard_path.read_text().splitlines()
    middle = lines[2].split(",")
    lines[2] = f"{middle[0]},{float(middle[1]) / 2:.5f}"
    task.spec.leaderboard_path.write_text("\n".join(lines) + "\n")
    assert lb.check_leaderboard(task, pinned=False, sample=2) == []
    assert lb.check_leaderboard(task, pinned=False)[0].startswith(f"entry {middle[0]}: committed")
    with pytest.raises(ConfigError, match="penguins's reference grid has no entry nope; its entries: "
                                          "constant-prior, tree-d1, tree-d2"):
        lb.build_leaderboard(task, pinned=False, entries=["nope"])


def test_a_folder_task_builds_in_the_pinned_child(tmp_path, data_dir):
    """The child finds the folder task again (--tasks-dir) and answers with the full grid."""
    folder = tmp_path / "tasks" / "penguins"
    shutil.copytree(BUILTIN_DIR / "penguins", folder)
    task = TaskRegistry([folder], include_builtin=False, data_dir=data_dir, mlebench=False).get("penguins")
    seen = []
    board = lb.build_leaderboard(task, progress=lambda done, total, name: seen.append(done))
    assert seen == list(range(1, len(board) + 1)) and len(board) == len(solution_grid(task))
    assert board.attrs["numerics"]["pin"] == ("x86-64-v3" if can_pin() else None)
    assert lb.compare_boards(task.leaderboard(), board, exact=False, tolerance=lb.score_tolerance(task)) == []


def test_invalid_entry_raises_with_its_name(tmp_path, data_dir, monkeypatch):
    from mleforge.errors import InvalidSubmission

    task = _builtin("penguins", data_dir)

    class Broken(ReferenceSolution):
        def fit_predict(self, task, train, test, memory=None):
            return super().fit_predict(task, train, test, memory).iloc[:-1]

    monkeypatch.setattr(rb, "solution_grid", lambda task: [Broken("broken-tree", "tree", {"max_depth": 2})])
    with pytest.raises(InvalidSubmission, match="reference solution broken-tree of penguins"):
        lb.build_leaderboard(task, pinned=False)
