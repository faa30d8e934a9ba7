"""`mleforge train` through the CLI: two real steps (generation auto, the real prompts) write
every promised file and field; bad values are refused before anything heavy starts."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import time

import pytest
import yaml

pytest.importorskip("trl")

from mleforge.cli.main import main  # noqa: E402
from mleforge.curriculum.buffer import StateBuffer  # noqa: E402
from mleforge.errors import MissingExtra  # noqa: E402
from mleforge.eval.contamination import read_record  # noqa: E402
from mleforge.policies import SamplingConfig, make_policy  # noqa: E402
from mleforge.train.config import TrainConfig  # noqa: E402
from mleforge.train.grpo.generation import ct2_installed  # noqa: E402
from mleforge.train.model import require_train_extra  # noqa: E402
from mleforge.train.records import RolloutLine, StepMetrics  # noqa: E402

CHECKPOINT_FILES = ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
                    "rng_state.pth", "trainer_state.json", "mleforge_checkpoint.json", "mleforge_model.json")


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def one_step(tiny, journals, data_root, run, *flags: str) -> dict:
    """`mleforge train` for one step of one group of 2 on titanic, from the test's journals, with
    `flags` on top; its JSON result."""
    code, out = cli("train", "--model", f"hf:{tiny}", "--tasks", "titanic", "--eval-tasks", "", "--steps", "1",
                    "--group-size", "2", "--max-new-tokens", "8", "--sft", "none", "--journals", str(journals),
                    "--executor", "local", *flags, "--run-dir", str(run), "--data-dir", str(data_root), "--json")
    assert code == 0
    return json.loads(out)


def test_two_steps_of_mleforge_train_write_every_promised_file(tiny, titanic, journals, data_root, tmp_path):
    run = tmp_path / "run"
    argv = ("train", "--model", f"hf:{tiny}", "--tasks", "titanic", "--eval-tasks", "", "--steps", "2",
            "--group-size", "2", "--groups-per-step", "1", "--max-new-tokens", "8", "--sft", "none",
            "--journals", str(journals), "--executor", "local", "--run-dir", str(run), "--data-dir",
            str(data_root), "--json")
    code, out = cli(*argv)
    assert code == 0
    printed = json.loads(out)
    assert printed["steps"] == 2 and printed["run_dir"] == str(run)

    config = TrainConfig.from_dict(yaml.safe_load((run / "config.yaml").read_text()))  # the full resolved config
    # generation auto: ct2 rollouts on a CPU where ctranslate2 is installed (the tiny Llama converts)
    auto = "ct2" if ct2_installed() else "trl"
    assert (config.steps, config.group_size, config.generation.backend, config.warm_start) == (2, 2, auto, "none")
    assert isinstance(config.bf16, bool)  # "auto" values are resolved for this machine
    record = read_record(run)
    assert record.kind == "train" and record.tasks == ("titanic",)

    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    assert all(set(m) == {f.name for f in dataclasses.fields(StepMetrics)} for m in metrics)
    for step in (0, 1):
        rows = [json.loads(x) for x in (run / "rollouts" / f"step-{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(set(r) == {f.name for f in dataclasses.fields(RolloutLine)} for r in rows)
        assert all(r["outcome"] == r["components"]["case"] and r["reward"] == r["components"]["total"] for r in rows)
    buffer = StateBuffer(run, create=False)
    assert buffer.sealed_step == 1 and buffer.counts()["rollouts"] == 4
    buffer.close()

    checkpoint = run / "checkpoints" / "checkpoint-2"
    assert all((checkpoint / name).is_file() for name in CHECKPOINT_FILES)
    assert json.loads((checkpoint / "mleforge_checkpoint.json").read_text()) == {"global_step": 2, "buffer_step": 1}
    final = make_policy(f"hf:{run / 'final'}", num_threads=1)  # the result loads as a policy
    assert final.generate([[{"role": "user", "content": "hi"}]], sampling=SamplingConfig(max_new_tokens=4))
    assert json.loads((run / "stepwise" / "before.json").read_text())["available"] is False

    md = (run / "report" / "report.md").read_text()
    for heading in ("## Training", "## Curves", "## Where a step's time goes", "## Steps (the last 30)"):
        assert heading in md
    assert (run / "report" / "train_curves.png").read_bytes()[:4] == b"\x89PNG"
    code, _ = cli("report", str(run), "--out", str(tmp_path / "again"))
    assert code == 0 and "## Curves" in (tmp_path / "again" / "report.md").read_text()
    # the same run resumed: it is done, nothing is redone
    code, out = cli("train", "--resume", str(run), "--data-dir", str(data_root), "--json")
    assert code == 0 and json.loads(out) == printed


def test_sft_auto_warm_starts_and_evaluates_before_and_after(tiny, titanic, data_root, tmp_path):
    """The main job's shape with a tiny model: --sft auto collects with the template expert (compact
    prompts) while the step-wise evaluation before runs alongside, fine-tunes, seeds the buffer from
    the same journals, and the step-wise evaluation runs on a task the run does not train on, on the
    same states before, after the warm start (--eval-after-sft on) and after."""
    from mleforge.eval.stepwise import StepwiseResult
    from mleforge.train.samples import read_samples

    run = tmp_path / "run"
    code, out = cli("train", "--model", f"hf:{tiny}", "--tasks", "titanic", "--eval-tasks", "penguins",
                    "--steps", "2", "--group-size", "2", "--max-new-tokens", "8", "--sft-steps", "1",
                    "--expert-steps", "3", "--stepwise-states", "2", "--stepwise-samples", "2",
                    "--sft-max-length", "16000",
                    "--executor", "local", "--engine", "transformers", "--eval-after-sft", "on",
                    "--run-dir", str(run), "--data-dir", str(data_root), "--json")
    assert code == 0 and json.loads(out)["steps"] == 2
    config = TrainConfig.from_dict(yaml.safe_load((run / "config.yaml").read_text()))
    assert (config.warm_start, config.prompt.profile, config.stepwise.engine) == ("auto", "compact", "transformers")
    assert config.stepwise.after_sft is True

    # the warm start: collect (compact prompts, the training task) then SFT from the tiny model
    collected = json.loads((run / "collect" / "collect.json").read_text())
    assert collected["tasks"] == ["titanic"] and collected["prompt_profile"] == "compact"
    samples = list(read_samples(run / "collect" / "samples.jsonl"))
    assert samples and len(samples) == collected["samples"]
    sft = json.loads((run / "sft" / "run.json").read_text())
    assert sft["kind"] == "sft" and sft["status"] == "done" and sft["steps"] == 1 and sft["tasks"] == ["titanic"]
    assert (run / "sft" / "model" / "adapter_config.json").is_file()
    assert not (run / "expert").exists()  # the buffer was seeded from collect/'s journals, not made again
    assert json.loads((run / "checkpoints" / "checkpoint-2" / "mleforge_model.json").read_text())

    # the step-wise evaluation: penguins, the model as given before, final/ after, the same states
    before, after = (json.loads((run / "stepwise" / f"{x}.json").read_text()) for x in ("before", "after"))
    assert before["available"] and after["available"]
    assert (before["policy"], after["policy"]) == (f"hf:{tiny}", f"hf:{run / 'final'}")
    assert before["tasks"] == after["tasks"] == ["penguins"] and before["prompt_profile"] == "compact"
    assert [(r["state_id"], r["seed"]) for r in before["records"]] == \
        [(r["state_id"], r["seed"]) for r in after["records"]]
    assert 1 <= before["n_states"] <= 2 and before["sampling"] == after["sampling"]
    assert before["seeds"] == [0, 1] and len(before["records"]) == 2 * before["n_states"]
    assert before["draw"]["headroom"] == "prefer"  # penguins' states may sit at the top: drawn, reported apart
    assert before["engine"]["name"] == "transformers"
    assert StepwiseResult.from_dict(before).records[0].stage in ("debug", "improve")
    # the warm start's own evaluation, on the same states, between them
    warm = json.loads((run / "stepwise" / "sft.json").read_text())
    assert warm["available"] and warm["policy"] == f"hf:{run / 'sft' / 'model'}"
    assert [r["state_id"] for r in warm["records"]] == [r["state_id"] for r in before["records"]]
    # run.json: the paired differences of the three, on the same states and seeds, and the null control
    paired = json.loads((run / "run.json").read_text())["stepwise"]
    assert [(c["label_a"], c["label_b"]) for c in paired["comparisons"]] == [
        ("before", "after SFT"), ("after SFT", "after"), ("before", "after")]
    assert all(c["kind"] == "paired" and c["seeds_a"] == [0, 1] for c in paired["comparisons"])
    assert paired["null_control"]["kind"] == "null_halves"
    md = (run / "report" / "report.md").read_text()
    assert "## Before and after training" in md and "| mean reward |" in md and "null control" in md
    assert "| metric | before | after SFT | after |" in md
    for a, b in (("before", "after SFT"), ("after SFT", "after"), ("before", "after")):
        assert f"| metric | {a} | {b} | {b} − {a} (paired) | 95% CI | up / down / tied | states |" in md
    # resumed when done: nothing is collected, fine-tuned or evaluated again
    mtimes = {p: p.stat().st_mtime for p in (run / "collect" / "collect.json", run / "stepwise" / "after.json")}
    code, _ = cli("train", "--resume", str(run), "--data-dir", str(data_root), "--json")
    assert code == 0 and all(p.stat().st_mtime == t for p, t in mtimes.items())


BASE = ("train", "--tasks", "titanic", "--eval-tasks", "", "--sft", "none", "--steps", "1")


@pytest.mark.parametrize("extra, message", [
    (("--group-size", "1"), "group_size: got 1; expected an integer >= 2; GRPO compares the rollouts"),
    (("--tasks", "no-such-task"), "no task 'no-such-task'"),
    (("--model", "hf:/no/such/model"), "is not a folder"),
    (("--model", "bundled:no-such-model"), "no bundled model 'no-such-model'"),
    (("--sft", "/no/such/sft"), "--sft /no/such/sft: no such folder"),
    (("--eval-tasks", "titanic"), "--eval-tasks titanic are also training tasks"),
    (("--micro-batch", "3"), "micro_batch: got 3; a step's 1 x 4 = 4 sequences must split"),
    (("--preset", "gpu-1x"), "torch sees no CUDA GPU"),
    (("--journals", "/no/such/journals"), "--journals /no/such/journals: not a folder"),
])
def test_bad_values_are_refused_before_anything_heavy(extra, message, data_root, tmp_path, capsys, tiny):
    model = () if "--model" in extra or "--preset" in extra else ("--model", f"hf:{tiny}")
    started = time.monotonic()
    code, _ = cli(*BASE, *model, *extra, "--run-dir", str(tmp_path / "run"), "--data-dir", str(data_root))
    assert code == 2 and message in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "run").exists() and time.monotonic() - started < 60


def test_resume_takes_no_other_setting(tmp_path, capsys):
    code, _ = cli("train", "--resume", str(tmp_path), "--steps", "3")
    assert code == 2 and "continues that run with its own config.yaml; drop the other settings (steps)" in \
        " ".join(capsys.readouterr().err.split())


def test_a_missing_train_extra_is_named(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trl" else real(name, *a))
    with pytest.raises(MissingExtra, match=r"needs the `trl` package.*pip install 'mleforge\[train\]'"):
        require_train_extra("mleforge train")


def test_the_flags_map_onto_the_config():
    from mleforge.cli.main import build_parser
    from mleforge.cli.train import overrides

    args = build_parser().parse_args([
        "train", "--model", "hf:x", "--lora-rank", "8", "--full", "--sampler", "uniform", "--no-buffer-growth",
        "--sft", "none", "--steps", "3", "--group-size", "2", "--groups-per-step", "2", "--max-new-tokens", "64",
        "--lr", "0.001", "--tasks", "titanic", "--eval-tasks", "penguins", "--seed", "7"])
    given = overrides(args)
    assert given == {"model": {"spec": "hf:x", "lora_rank": 8, "full": True}, "sampler": {"kind": "uniform"},
                     "buffer_growth": False, "warm_start": "none", "steps": 3, "group_size": 2, "groups_per_step": 2,
                     "max_new_tokens": 64, "lr": 0.001, "tasks": "titanic", "eval_tasks": "penguins", "seed": 7}
    config = TrainConfig.preset_config("cpu", **given)
    assert (config.model.full, config.model.lora_rank, config.buffer_growth, config.sampler.kind) == (True, 8, False,
                                                                                                 "uniform")
    assert overrides(build_parser().parse_args(["train"])) == {}  # no flag: the preset's defaults
    warm = overrides(build_parser().parse_args(["train", "--sft-steps", "5", "--sft-lr", "0.001",
                                                "--sft-loss-samples", "4"]))
    assert warm == {"sft": {"max_steps": 5, "lr": 0.001, "loss_samples": 4}}
