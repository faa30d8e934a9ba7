"""The engine seam's own parts: how the ct2 engine batches, which engine a config gets, and
what happens without ctranslate2. Nothing here needs ctranslate2 installed."""

from __future__ import annotations

import sys

import pytest

from mleforge.errors import MissingExtra
from mleforge.policies.engines.ct2 import plan_groups
from mleforge.policies.hf import choose_engine
from mleforge.policies.hf_config import HFConfig


def test_plan_groups_shares_a_batch_only_between_prompts_of_nearly_one_length():
    # Sorted: 0 (10 tokens), 3 (11), 2 (12), 1 (30); 30 is 20 longer than the batch's first.
    assert plan_groups([10, 30, 12, 11], 1, 16) == [([0, 3, 2], 1), ([1], 1)]
    # 4 samples each, at most 8 sequences a batch: two prompts a batch, 12 vs 30 apart.
    assert plan_groups([10, 30, 12, 11], 4, 8) == [([0, 3], 4), ([2], 4), ([1], 4)]
    assert plan_groups([5, 5, 5], 2, 16, ragged_tokens=0) == [([0, 1, 2], 2)]
    assert plan_groups([5, 6], 1, 16, ragged_tokens=0) == [([0], 1), ([1], 1)]
    # More samples than fit: each prompt alone, its samples in chunks (one prefill each).
    assert plan_groups([7, 9], 10, 4) == [([0], 4), ([0], 4), ([0], 2), ([1], 4), ([1], 4),
                                          ([1], 2)]
    assert plan_groups([], 3, 8) == []


def test_config_checks_engine_and_quantization():
    assert HFConfig(model="m").engine == "transformers"  # today's behaviour unless asked
    assert HFConfig(model="m", engine="ct2", quantization="int8_float16").quantization == \
        "int8_float16"
    with pytest.raises(ValueError, match="engine must be one of"):
        HFConfig(model="m", engine="vllm")
    with pytest.raises(ValueError, match="quantization must be one of"):
        HFConfig(model="m", engine="ct2", quantization="int4")
    with pytest.raises(ValueError, match="quantization applies to the ct2 engine"):
        HFConfig(model="m", quantization="int8")


def test_without_ctranslate2_ct2_names_the_extra_and_auto_falls_back(monkeypatch):
    # A None entry makes `import ctranslate2` raise ImportError, as if it were not installed.
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(MissingExtra, match=r"pip install 'mleforge\[fast\]'"):
        choose_engine(HFConfig(model="anything", engine="ct2"))
    choice = choose_engine(HFConfig(model="anything", engine="auto"))
    assert choice.name == "transformers" and "ctranslate2 is not installed" in choice.reason
    assert "mleforge[fast]" in choice.reason
    from mleforge.policies import make_policy

    with pytest.raises(MissingExtra, match=r"the ct2 engine needs the `ctranslate2` package"):
        make_policy("hf:./no-such-model", engine="ct2")  # before the model is even looked for
