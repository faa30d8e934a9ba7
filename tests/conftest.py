"""Shared fixtures: every test's data lives under a temporary data root, never in $HOME."""

from __future__ import annotations

import os

import pytest

from mleforge.paths import DATA_ENV


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mleforge-data")
    previous = os.environ.get(DATA_ENV)
    os.environ[DATA_ENV] = str(root)
    yield root
    if previous is None:
        os.environ.pop(DATA_ENV, None)
    else:
        os.environ[DATA_ENV] = previous


@pytest.fixture(scope="session")
def registry(data_root):
    from mleforge.tasks.registry import TaskRegistry

    return TaskRegistry(data_dir=data_root, mlebench=False)


@pytest.fixture(scope="session")
def prepared_registry(registry):
    """The built-in suite, prepared once for the whole session."""
    from mleforge.tasks.preparation import prepare

    for task in registry.tasks():
        prepare(task)
    return registry
