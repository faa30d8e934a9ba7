"""Markdown and HTML reports from evaluation folders; the HTML rendered in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mleforge.errors import ConfigError
from mleforge.eval.report import Section, Text, register_section, write_report
from tests.eval.helpers import grid_reports, report, write_eval_dir

RUN_BLUE = (0x09, 0x69, 0xDA)  # plots.RUN_COLORS[0]


@pytest.fixture
def two_evals(tmp_path):
    reports, failures = grid_reports()
    first = write_eval_dir(tmp_path / "before", "hf:ckpt-0", reports, failures,
                           contamination_warning="CONTAMINATION: trained on A")
    better = [report("A", s, 0.96, normalized=1.0, medal="gold", above=True, first_valid=1) for s in (0, 1, 2)]
    better += [report("B", s, 1.2, normalized=0.9, medal="silver", above=True, first_valid=2, lower=True)
               for s in (0, 1, 2)]
    second = write_eval_dir(tmp_path / "after", "hf:ckpt-400", better, isolation={"kind": "none", "summary": "none"})
    return first, second


def test_markdown_and_html_compare_two_evaluations(two_evals, tmp_path):
    written = write_report(list(two_evals), tmp_path / "out", labels=["before", "after"])
    md = Path(written.markdown).read_text()
    for heading in ("## Summary", "## Valid submissions and medals", "## Scores per task",
                    "## Compared with before", "## All runs"):
        assert heading in md
    assert "| before | public | 2 | 3 x 3 | 5/6 | 83.3 ± 16.7 | 50.0 ± 28.9 |" in md  # the hand-computed rates
    assert "| after | public | 2 | 3 x 3 | 6/6 | 100.0 ± 0.0 |" in md
    assert "| A | accuracy (↑) | 0.96 / 0.88 (2/3) G1 | 0.96 / 0.96 (3/3) G3 |" in md
    assert "> **Warning:** before: CONTAMINATION: trained on A" in md
    assert "1 of 6 runs did not finish (1 failed, 0 not run)" in md
    # The isolation of each evaluation's scripts: a column, and a warning for none.
    assert "| bwrap 0.8.0 (system: /usr/bin/bwrap) |" in md and "| none |" in md
    assert "after: its scripts ran UNISOLATED (--isolation none)" in md
    assert "RuntimeError: boom" in md
    for name in ("rates", "task_scores", "normalized"):
        assert f"](./{name}.png)" in md and (tmp_path / "out" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"

    page = Path(written.html).read_text()
    assert page.count("data:image/png;base64,") == 3
    # Self-contained: nothing is fetched from anywhere.
    assert not re.search(r"""(src|href)=["'](https?:|//|file:)""", page)
    assert "<script" not in page


def test_sections_registry_takes_other_run_kinds(two_evals, tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    (train / "run.json").write_text(json.dumps({"kind": "test-train", "tasks": ["A"]}))
    (train / "metrics.json").write_text(json.dumps({"loss": [3.0, 2.0, 1.5]}))

    def curves(runs):
        return [Section("Training", tuple(Text(f"{r.label}: final loss {r.files['metrics']['loss'][-1]}")
                                          for r in runs))]

    register_section("test-train", curves)
    md = Path(write_report([two_evals[0], train], tmp_path / "out").markdown).read_text()
    assert "## Training" in md and "final loss 1.5" in md and "## Summary" in md

    (train / "run.json").write_text(json.dumps({"kind": "mystery", "tasks": []}))
    md = Path(write_report([train], tmp_path / "out2").markdown).read_text()
    assert "no report sections are registered for runs of kind 'mystery'" in md


def test_errors_name_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="not a run folder"):
        write_report([tmp_path], tmp_path / "out")
    with pytest.raises(ConfigError, match="one label per run"):
        write_report([tmp_path], tmp_path / "out", labels=["a", "b"])


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium "
                                              "chromium-driver); it renders the HTML report")
def test_html_report_renders_in_headless_chromium(two_evals, tmp_path):
    from PIL import Image

    written = write_report(list(two_evals), tmp_path / "out", labels=["before", "after"])
    shot = tmp_path / "shot.png"
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,2000",
         f"file://{written.html}"],
        check=True, capture_output=True, timeout=120,
    )
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2000)
    pixels = np.asarray(image, dtype=int).reshape(-1, 3)
    # Not blank: text, tables and plots give many colours and plenty of non-white pixels...
    assert len(np.unique(pixels, axis=0)) > 200
    assert (pixels != 255).any(axis=1).mean() > 0.15
    # ...and the plots were decoded: the first run's bars are drawn in its solid colour.
    assert (np.abs(pixels - RUN_BLUE).max(axis=1) <= 8).sum() > 2000
