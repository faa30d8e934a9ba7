"""Fixtures of the training tests: the titanic task prepared, tiny models, an expert journal."""

from __future__ import annotations

import pytest

from tests.train.tiny import tiny_model


@pytest.fixture(scope="session")
def titanic(registry):
    from mleforge.tasks.preparation import prepare

    task = registry.get("titanic")
    prepare(task)
    return task


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    pytest.importorskip("trl")
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def learner(tmp_path_factory):
    """tests/train/tiny_model.py's warm-started tiny Qwen2 (a transformers folder): a model whose
    behaviour GRPO can move in a few dozen CPU steps."""
    pytest.importorskip("trl")
    from tests.train.tiny_model import build_learner

    return build_learner(tmp_path_factory.mktemp("learner") / "model")


@pytest.fixture(scope="session")
def journals(titanic, tmp_path_factory):
    """A folder holding one real expert journal of titanic: a draft that crashed, its debug
    (copy the sample submission: valid) and an improve of that (predict 0: valid)."""
    from mleforge.agent.journal import Journal
    from mleforge.agent.state import State
    from mleforge.agent.step import RewardContext, run_step
    from mleforge.sandbox import make_executor
    from tests.agent.scripted import COPY_SAMPLE, CRASH
    from tests.train.engines import ZEROS

    folder = tmp_path_factory.mktemp("journals") / "expert" / "titanic"
    rewards = RewardContext(titanic)
    journal = Journal("titanic", "higher")
    with make_executor("local") as executor:
        state = State.draft("titanic", direction="higher")
        for text in (CRASH, COPY_SAMPLE, ZEROS):
            outcome = run_step(state, text, titanic, executor, rewards, node_id=f"n{len(journal)}")
            journal = journal.add(outcome.node)
            state = State.after(journal, outcome.node)
    assert [n.outcome for n in journal.nodes] == ["execution_error", "valid", "valid"]
    journal.save(folder / "journal.json")
    return folder.parent.parent
