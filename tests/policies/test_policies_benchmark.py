"""benchmarks/policies.py: its estimate of a shape's cost, the report it writes after every
measurement and resumes, and one real run on the bundled SmolLM2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.benchmark_module import ROOT, assert_convention, load_benchmark
from tests.policies.test_bundled_models import skip_unless_installed

bench = load_benchmark("policies")


def row(prompt, mode, size, prefill_s, tokens=100):
    return {"prompt": prompt, "prompt_tokens": tokens, "mode": mode, "size": size,
            "prefill_s": prefill_s, "total_s": 2 * prefill_s, "tokens_per_s": 8.0, "decode_tokens_per_s": None}


def test_prefills_counts_a_group_once_on_ct2_only():
    assert bench.prefills("ct2-int8", "group", 4) == 1
    assert bench.prefills("transformers-float32", "group", 4) == 4
    assert bench.prefills("ct2-int8", "batch", 8) == 8


def test_estimate_scales_the_largest_measured_shape_of_that_prompt():
    runs = [row("improve", "batch", 1, 10.0), row("improve", "batch", 4, 30.0),
            row("short", "batch", 8, 1.0, tokens=20)]
    # two calls, each prefilling 8 prompts, at batch 4's 30 s for 4 prompts: 2 * 30 * 8 / 4
    assert bench.estimate("transformers-float32", runs, "improve", "batch", 8, 100, None) == 120.0
    # a transformers group of 4 prefills 4 prompts: 2 * 30 * 4 / 4
    assert bench.estimate("transformers-float32", runs, "improve", "group", 4, 100, None) == 60.0
    # ct2 prefills a group's prompt once: 2 * 30 * 1 / 4
    assert bench.estimate("ct2-int8", runs, "improve", "group", 4, 100, None) == 15.0


def test_estimate_from_the_probe_when_nothing_is_measured():
    probe = {"tokens": 128, "seconds": 16.0, "prefill_tokens_per_s": 8.0}
    # 2 calls x 4 prompts x 3,200 tokens at 8 tokens/s
    assert bench.estimate("transformers-bfloat16", [], "improve", "batch", 4, 3200, probe) == 3200.0
    assert bench.estimate("transformers-bfloat16", [], "improve", "batch", 4, 3200, None) is None
    skipped = [{"prompt": "improve", "prompt_tokens": 3200, "mode": "batch", "size": 1,
                "skipped": True, "estimated_s": 800.0}]
    assert bench.estimate("transformers-bfloat16", skipped, "improve", "batch", 4, 3200,
                          probe) == 3200.0  # a skipped shape measured nothing


def header(tokens=64, prompts=None):
    return {"tokens": tokens, "prompt_sha256": prompts or {"short": "a", "improve": "b"}, "import_s": 2.5}



def test_report_is_written_whole_after_each_save(tmp_path):
    out = tmp_path / "report.json"
    report = bench.Report(out, header(), resume=False)
    report.start_model({"model": "m", "assemble_s": None, "hf_convert_s": 3.25, "engines": []})
    report.add({"model": "m", "engine": "e", "threads": 2, "convert_s": None, "load_s": 1.04, "runs": []})
    saved = json.loads(out.read_text())
    assert saved["complete"] is False and saved["results"][0]["engines"][0]["engine"] == "e"
    report.models[0]["engines"][0]["runs"].append(row("short", "batch", 1, 0.5))
    report.save(complete=True)
    saved = json.loads(out.read_text())
    assert saved["complete"] is True and saved["results"][0]["engines"][0]["runs"][0]["size"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left
    assert_convention(saved, "policies", script="")
    assert saved["table"]["title"] == "Getting ready (seconds; importing torch + transformers: 2.5)"
    assert saved["table"]["rows"] == [["m", "cached", 3.2, "e", 2, "-", 1.0]]
    speed = saved["tables"][0]
    assert speed["rows"] == [["m", "e", 2, "short", 100, "batch 1", 0.5, 1.0, 8.0, None]]


def test_resume_keeps_rows_of_unchanged_prompts_only(tmp_path):
    out = tmp_path / "report.json"
    old = {**header(prompts={"short": "a", "improve": "old"}), "results": [
        {"model": "m", "engines": [{"model": "m", "engine": "e", "threads": 2, "runs": [
            row("short", "batch", 1, 0.5), row("improve", "batch", 1, 9.0)]}]}]}
    out.write_text(json.dumps(old))
    report = bench.Report(out, header(prompts={"short": "a", "improve": "new"}), resume=True)
    kept = report.earlier("m", "e", 2)["runs"]
    assert [g["prompt"] for g in kept] == ["short"]
    # a report written before the results convention (no meta, no tables) gains them on the next save
    report.start_model({"model": "m", "assemble_s": None, "hf_convert_s": None, "engines": []})
    report.add({**report.earlier("m", "e", 2), "convert_s": None, "load_s": 1.0})
    saved = json.loads(out.read_text())
    assert_convention(saved, "policies", script="")
    assert saved["table"]["rows"] == [["m", "cached", "cached", "e", 2, "-", 1.0]]
    assert report.earlier("m", "other", 2) is None
    assert bench.Report(out, header(), resume=False).earlier("m", "e", 2) is None


def test_resume_refuses_other_tokens_and_foreign_files(tmp_path):
    out = tmp_path / "report.json"
    out.write_text(json.dumps({**header(tokens=16), "results": []}))
    with pytest.raises(SystemExit, match="measured --tokens 16, not 64"):
        bench.Report(out, header(tokens=64), resume=True)
    out.write_text("{not json")
    with pytest.raises(SystemExit, match="is not a report of this benchmark"):
        bench.Report(out, header(), resume=True)
    out.write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="is not a report of this benchmark"):
        bench.Report(out, header(), resume=True)


def run_benchmark(out, *extra):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "policies.py"), "--models", "smollm2-135m",
         "--prompts", "short", "--engines", "transformers-float32", "--group", "0",
         "--tokens", "2", "--threads", "1", "--no-mismatch", "--out", str(out), *extra],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stderr


@pytest.mark.slow
@skip_unless_installed("smollm2-135m")
def test_a_real_run_resumes_and_skips_over_budget(tmp_path):
    out = tmp_path / "smol.json"
    first, log = run_benchmark(out, "--batches", "1")
    assert first["complete"] is True
    assert_convention(first, "policies")
    assert first["meta"]["command"].startswith("python benchmarks/policies.py --models smollm2-135m")
    (engine,) = first["results"][0]["engines"]
    (measured,) = engine["runs"]
    assert measured["prefill_s"] > 0 and measured["sequences"] == 1 and measured["tokens"] == 2
    assert "short batch 1: prefill" in log

    # Batch 1 is kept; batch 2 would take at least 2 x 2 x batch 1's prefill: over a tiny budget.
    second, log = run_benchmark(out, "--batches", "1", "2", "--resume", "--budget", "1e-9")
    runs = second["results"][0]["engines"][0]["runs"]
    assert runs[0] == {**measured, "resumed": True}
    assert runs[1]["skipped"] is True and runs[1]["size"] == 2
    assert runs[1]["estimated_s"] == pytest.approx(2 * measured["prefill_s"] * 2)
    assert "short batch 1: prefill" not in log and "short batch 2: skipped, at least" in log

    # Everything measured: the engine entry comes back as it was, without loading the model.
    third, log = run_benchmark(out, "--batches", "1", "--resume")
    assert third["results"][0]["engines"][0]["load_s"] == second["results"][0]["engines"][0]["load_s"]
    assert third["results"][0]["engines"][0]["runs"] == [{**measured, "resumed": True}]
    assert "short batch" not in log


def test_header_records_the_backend_variables_and_versions(monkeypatch):
    monkeypatch.setenv("CT2_USE_MKL", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MLEFORGE_UNRELATED", "x")
    chosen = bench.backend_environment()
    assert chosen["CT2_USE_MKL"] == "1" and chosen["OMP_NUM_THREADS"] == "2"
    assert "MLEFORGE_UNRELATED" not in chosen
    assert chosen["version:torch"].startswith("2.")
