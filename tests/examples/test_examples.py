"""The runnable scripts of examples/, run as a user runs them (their main() with command-line
arguments) on the smallest settings: a task of one's own trained on, an OpenAI-compatible
server evaluated (a real HTTP server on 127.0.0.1), SFT from a served teacher; the GPU config
read as `mleforge train --config` reads it."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from tests.agent.scripted import COPY_SAMPLE
from tests.policies.chat_server import ChatServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = ("train_my_task.py", "eval_openai_server.py", "sft_from_teacher.py")


def main_of(script: str):
    return runpy.run_path(str(EXAMPLES / script))["main"]


class SolvingServer(ChatServer):
    """A served model whose every answer is a plan and a script that copies the sample submission."""

    def _answer(self, body):
        answer = super()._answer(body)
        for choice in answer["choices"]:
            choice["message"]["content"] = COPY_SAMPLE
        return answer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("trl")
    from tests.train.tiny import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_every_example_says_what_it_shows_and_how_to_run_it():
    for script in SCRIPTS:
        doc = runpy.run_path(str(EXAMPLES / script))["__doc__"]
        assert doc and f"python examples/{script}" in doc, script
    assert (EXAMPLES / "gpu.yaml").read_text().startswith("# One GPU")
    assert "mleforge.tasks.authoring" in (EXAMPLES / "my_task" / "prepare.py").read_text()


def test_train_on_my_task(tiny, data_root, tmp_path, capsys):
    run = tmp_path / "run"
    main_of("train_my_task.py")(["--model", f"hf:{tiny}", "--steps", "1", "--group-size", "2",
                                 "--max-new-tokens", "8", "--expert-steps", "3", "--run-dir", str(run)])
    out = capsys.readouterr().out
    assert "prepared wine" in out and "trained 1 steps" in out
    assert json.loads((run / "run.json").read_text())["tasks"] == ["wine"]
    (line,) = (run / "metrics.jsonl").read_text().splitlines()
    assert json.loads(line)["step"] == 0 and (run / "final" / "adapter_config.json").is_file()


def test_eval_an_openai_compatible_server(data_root, tmp_path, capsys):
    with SolvingServer(model="served-model") as server:
        aggregate = main_of("eval_openai_server.py")(
            ["--base-url", server.url, "--model", "served-model", "--tasks", "penguins", "--seeds", "1",
             "--steps", "1", "--out", str(tmp_path / "eval")])
    assert server.seen and server.seen[0].path == "/v1/chat/completions"
    # the served script copies the sample submission: valid, and as good as the baseline
    assert aggregate["metrics"]["valid_submission"]["mean"] == 1.0
    assert "valid_submission: 1.000" in capsys.readouterr().out


def test_sft_from_a_served_teacher(tiny, data_root, tmp_path, capsys):
    with SolvingServer(model="teacher") as server:
        main_of("sft_from_teacher.py")(["--teacher", "teacher", "--teacher-url", server.url, "--model", f"hf:{tiny}",
                                        "--tasks", "titanic", "--episodes", "1", "--steps", "2", "--sft-steps", "1", "--embedder", "tfidf",
                                        "--out", str(tmp_path / "sft")])
    assert len(server.seen) == 2  # one request per expert step
    samples = [json.loads(x) for x in (tmp_path / "sft" / "collect" / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["teacher"] == "openai:teacher" for s in samples)
    assert 'sub.to_csv("submission/submission.csv", index=False)' in samples[0]["completion"][0]["content"]
    record = json.loads((tmp_path / "sft" / "sft" / "run.json").read_text())
    assert record["status"] == "done" and record["steps"] == 1
    assert "fine-tuned 1 steps" in capsys.readouterr().out


def test_the_gpu_config_is_a_valid_train_config():
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import train_config

    config = train_config(build_parser().parse_args(["train", "--config", str(EXAMPLES / "gpu.yaml")]))
    assert (config.preset, config.model.device, config.model.dtype, config.report_to) == (
        "gpu-1x", "cuda", "bfloat16", "tensorboard")
    assert (config.group_size, config.groups_per_step, config.sandbox.exec_workers) == (8, 8, 16)
