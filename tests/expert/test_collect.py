"""`mleforge collect`: expert episodes run in the sandbox, resumed after an interruption, and
turned into SFT samples in TRL's conversational prompt-completion format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mleforge.agent.actions import parse_completion
from mleforge.agent.journal import Journal
from mleforge.errors import ConfigError
from mleforge.expert.collect import CollectConfig, collect_samples
from mleforge.expert.episodes import load_journals
from mleforge.sandbox import make_executor
from mleforge.sandbox.caching_executor import CachingExecutor
from tests.agent.scripted import COPY_SAMPLE, CRASH, ScriptedPolicy

KEYS = {"prompt", "completion", "task_id", "stage", "state_id", "teacher", "ideas", "outcome", "valid", "score",
        "reward", "improved", "episode", "step", "node_id", "completion_format", "edits_visible", "prompt_profile",
        "completion_chars"}


def read_samples(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


class Interrupting:
    """A policy that stops the process (as Ctrl-C would) at its `at`-th call."""

    def __init__(self, policy, at: int):
        self.policy, self.at, self.calls = policy, at, 0

    def generate(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt("interrupted by the test")
        return self.policy.generate(*args, **kwargs)

    def close(self):
        pass


@pytest.fixture(scope="module")
def executor():
    with make_executor("local") as ex:
        yield ex


@pytest.mark.slow
def test_template_samples_resume_and_match_an_uninterrupted_collect(prepared_registry, tmp_path):
    from mleforge.expert.policy import TemplatePolicy

    config = CollectConfig(tasks="titanic,penguins", episodes=1, steps=3, embedder="tfidf", workers=1)
    with CachingExecutor(make_executor("local"), tmp_path / "cache.sqlite") as cached:
        interrupted = Interrupting(TemplatePolicy(prepared_registry), at=5)
        with pytest.raises(KeyboardInterrupt):
            collect_samples(config, tmp_path / "a", registry=prepared_registry, policy=interrupted, executor=cached)
        assert sum(len(j) for j in load_journals(tmp_path / "a")) == 4  # the fifth step never ran

        counting = Interrupting(TemplatePolicy(prepared_registry), at=0)
        result = collect_samples(config, tmp_path / "a", registry=prepared_registry, policy=counting,
                                 executor=cached)
        assert counting.calls == 2  # only the steps left: nothing finished was redone
        again = collect_samples(config, tmp_path / "b", registry=prepared_registry,
                                policy=TemplatePolicy(prepared_registry), executor=cached)

    assert read_samples(result.samples_path) == read_samples(again.samples_path)
    assert result.counts["episodes"] == {"expected": 2, "finished": 2} and result.counts["steps"] == 6
    assert (result.skipped, result.ran) == (1, 1)  # titanic had finished; penguins resumed at its 2nd step
    record = json.loads((tmp_path / "a" / "run.json").read_text())
    assert record["kind"] == "collect" and record["tasks"] == ["titanic", "penguins"]
    summary = json.loads((tmp_path / "a" / "collect.json").read_text())
    assert summary["samples"] == len(read_samples(result.samples_path)) == result.counts["samples"]
    assert summary["samples"] + sum(summary["left_out"].values()) == 6

    samples = read_samples(result.samples_path)
    journals = {j.task_id: j for j in load_journals(result.journals_dir)}
    for sample in samples:
        assert set(sample) == KEYS and sample["teacher"] == "template" and sample["prompt_profile"] == "full"
        assert [m["role"] for m in sample["prompt"]] == ["system", "user"]
        assert [m["role"] for m in sample["completion"]] == ["assistant"]
        journal = journals[sample["task_id"]]
        node = journal.get(sample["node_id"])
        assert sample["valid"] and node.valid and sample["outcome"] == "valid" and sample["edits_visible"]
        base = journal.get(node.parent_id).code if node.parent_id else None
        action = parse_completion(sample["completion"][0]["content"], sample["stage"], base)
        assert action.code == node.code  # the completion reproduces the script that ran
        assert action.format == ("script" if sample["stage"] == "draft" else "edits")
        if sample["step"] == 0:
            assert 1 <= len(sample["ideas"]) <= 3  # exploration enrichment, in the first prompt only
            assert "# Ideas to consider" in sample["prompt"][1]["content"]
        else:
            assert sample["ideas"] == []
    assert {s["stage"] for s in samples} == {"draft", "improve"}
    steps = [json.loads(x) for x in (tmp_path / "a" / "journals" / "titanic" / "seed0-ep0" / "steps.jsonl")
             .read_text().splitlines()]
    by_node = {s["node_id"]: s for s in samples}
    for line in steps:
        if line["node_id"] in by_node:
            assert by_node[line["node_id"]]["state_id"] == line["state_id"]
            assert by_node[line["node_id"]]["reward"] == line["reward"]["total"]


def test_filtering_keeps_valid_steps_and_fixed_bugs(prepared_registry, executor, tmp_path):
    """Draft crashes; the debug step writes a working script (a fixed bug); the improve step
    answers with prose (a format error, which keeps no completion)."""
    config = CollectConfig(tasks="titanic", episodes=1, steps=3, drafts=1, debug_prob=1.0, ideas_high=2,
                           embedder="tfidf", workers=1)
    texts = [CRASH, COPY_SAMPLE, "I would tune the model."]
    result = collect_samples(config, tmp_path / "c", registry=prepared_registry,
                             policy=ScriptedPolicy(texts), executor=executor)
    [debug] = read_samples(result.samples_path)
    assert (debug["stage"], debug["outcome"], debug["completion_format"]) == ("debug", "valid", "edits")
    assert debug["reward"] == 0.5 and debug["score"] is not None and debug["improved"] is None
    assert result.counts["left_out"] == {"failed": 1, "no_completion": 1}
    assert result.counts["outcomes"] == {"execution_error": 1, "format_error": 1, "valid": 1}
    journal = load_journals(result.journals_dir)[0]
    crash, fixed = journal.nodes[0], journal.nodes[1]
    assert parse_completion(debug["completion"][0]["content"], "debug", crash.code).code == fixed.code

    kept = collect_samples(CollectConfig(**{**config.to_dict(), "keep_failures": True}), tmp_path / "c",
                           registry=prepared_registry, policy=ScriptedPolicy([]), executor=executor)
    assert kept.skipped == 1 and kept.ran == 0  # nothing ran again: the samples were re-made from journals
    draft, debug_again = read_samples(kept.samples_path)
    assert (draft["stage"], draft["outcome"], draft["valid"], draft["reward"]) == \
        ("draft", "execution_error", False, -0.2)  # r_fail
    assert 1 <= len(draft["ideas"]) <= 2 and debug_again == debug
    assert kept.counts["left_out"] == {"no_completion": 1}


def test_hidden_edits_are_left_out_under_a_tight_script_view(prepared_registry, executor, tmp_path):
    long = COPY_SAMPLE.replace('import pandas as pd\n', 'import pandas as pd\n\n\ndef unused():\n'
                               + "".join(f"    v{i} = {i}\n" for i in range(40)) + "    return v0\n\n\n")
    edited = long.replace("    v5 = 5\n", "    v5 = 6\n")
    config = CollectConfig(tasks="titanic", episodes=1, steps=2, drafts=1, ideas_high=0, workers=1,
                           prompt_profile="compact", code_chars=200)
    result = collect_samples(config, tmp_path / "h", registry=prepared_registry,
                             policy=ScriptedPolicy([long, edited]), executor=executor)
    assert [s["stage"] for s in read_samples(result.samples_path)] == ["draft"]
    assert result.counts["left_out"] == {"hidden_edits": 1}
    kept = collect_samples(CollectConfig(**{**config.to_dict(), "keep_hidden_edits": True}), tmp_path / "h",
                           registry=prepared_registry, policy=ScriptedPolicy([]), executor=executor)
    improve = read_samples(kept.samples_path)[1]
    assert improve["stage"] == "improve" and improve["edits_visible"] is False


def test_bad_settings_are_refused(prepared_registry, tmp_path):
    for bad, match in (({"teacher": "hf:x"}, "collect.teacher"), ({"teacher": "openai:"}, "collect.teacher"),
                       ({"ideas_low": 2, "ideas_high": 1}, "ideas_high"), ({"prompt_profile": "x"}, "prompt_profile"),
                       ({"episodes": 0}, "collect.episodes"), ({"workers": 0}, "collect.workers")):
        with pytest.raises(ConfigError, match=match):
            CollectConfig(**bad)
    with pytest.raises(ConfigError, match="matches no task"):
        collect_samples(CollectConfig(tasks=","), tmp_path / "x", registry=prepared_registry)
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "run.json").write_text(json.dumps({"kind": "collect", "config": {
        **CollectConfig().to_dict(), "steps": 99}}))
    with pytest.raises(ConfigError, match="other settings.*steps 99 -> 6"):
        collect_samples(CollectConfig(tasks="titanic"), tmp_path / "y", registry=prepared_registry)
    # a compact collection made before completion budgets (no completion_chars saved) had the long
    # answers: not resumed with short ones; a setting a later version dropped does not break the check
    compact = CollectConfig(tasks="titanic", prompt_profile="compact").to_dict()
    old = {k: v for k, v in compact.items() if k != "completion_chars"}
    (tmp_path / "y" / "run.json").write_text(json.dumps({"kind": "collect", "config": {**old, "dropped": 1}}))
    with pytest.raises(ConfigError, match=r"other settings \(completion budget 0 -> 720\)"):
        collect_samples(CollectConfig(tasks="titanic", prompt_profile="compact"), tmp_path / "y",
                        registry=prepared_registry)


def test_cli_collect_writes_samples(prepared_registry, data_root, tmp_path):
    from mleforge.cli.main import main

    out = tmp_path / "cli"
    code = main(["collect", "--tasks", "penguins", "--episodes", "1", "--steps", "1", "--embedder", "tfidf",
                 "--out", str(out), "--data-dir", str(data_root), "--json"])
    assert code == 0
    [sample] = read_samples(out / "samples.jsonl")
    assert sample["task_id"] == "penguins" and sample["stage"] == "draft" and sample["prompt_profile"] == "full"
    assert len(Journal.load(out / "journals" / "penguins" / "seed0-ep0" / "journal.json")) == 1


def test_collect_imports_without_torch():
    code = "import sys, mleforge.expert.collect, mleforge.cli.collect; print(sorted({'torch', 'transformers', " \
           "'trl'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
