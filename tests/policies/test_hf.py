"""The local transformers policy, on a tiny random Llama built offline by the test."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from mleforge.errors import ConfigError, MissingExtra  # noqa: E402
from mleforge.policies import Policy, PolicyError, SamplingConfig, make_policy  # noqa: E402
from mleforge.policies.engines.base import Sample  # noqa: E402
from mleforge.policies.engines.transformers import plan_batches, row_end  # noqa: E402
from mleforge.policies.hf import HFPolicy  # noqa: E402
from mleforge.policies.hf_config import HFConfig  # noqa: E402
from tests.policies.tiny_model import build_lora_adapter, build_tiny_model  # noqa: E402

SAMPLE = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=7)
GREEDY = SamplingConfig(temperature=0, max_new_tokens=12)


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You write code."}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def policy(tiny):
    # One thread: much faster than two on a CPU that other work shares.
    return HFPolicy(HFConfig(model=str(tiny), num_threads=1, sampling=SAMPLE))


def test_n_samples_per_prompt_with_token_counts(policy):
    prompts = [ask("add two numbers"), ask("import pandas as pd and numpy as np")]
    out = policy.generate(prompts, n=3)
    assert [len(c) for c in out] == [3, 3]
    tokenizer = policy.tokenizer
    for prompt, completions in zip(prompts, out):
        expected = len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True,
                                                     tokenize=True, return_dict=True)["input_ids"])
        for c in completions:
            assert c.prompt_tokens == expected  # padding is not counted
            assert 1 <= c.completion_tokens <= 12
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert c.completion_tokens == 12
            assert c.model == policy.model and c.latency_s > 0
    assert len({c.text for c in out[0]}) > 1  # samples differ
    usage = policy.usage()
    assert usage.completions >= 6
    assert usage.completion_tokens >= sum(c.completion_tokens for got in out for c in got)


def test_seeded_runs_repeat_and_calls_differ(tiny, policy):
    again = HFPolicy(HFConfig(model=str(tiny), num_threads=1, sampling=SAMPLE))
    first = HFPolicy(HFConfig(model=str(tiny), num_threads=1, sampling=SAMPLE))
    prompts = [ask("add two numbers")]
    a1, a2 = first.generate(prompts, n=2), first.generate(prompts, n=2)
    b1, b2 = again.generate(prompts, n=2), again.generate(prompts, n=2)
    texts = lambda out: [c.text for c in out[0]]  # noqa: E731
    assert texts(a1) == texts(b1) and texts(a2) == texts(b2)
    assert texts(a1) != texts(a2)
    other = first.generate(prompts, n=2, sampling=SamplingConfig(max_new_tokens=12, seed=8))
    assert texts(other) != texts(a1)


def test_the_callers_random_state_is_untouched(policy):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    policy.generate([ask("x")])
    assert torch.equal(torch.rand(3), expected)


def test_left_padding_gives_the_same_greedy_answer_as_alone(policy):
    short, long = ask("hi"), ask("import numpy as np and pandas as pd and write the submission")
    together = policy.generate([short, long], sampling=GREEDY)
    alone = policy.generate([short], sampling=GREEDY)
    assert together[0][0].text == alone[0][0].text
    assert together[0][0].completion_tokens == alone[0][0].completion_tokens


def test_greedy_n_copies_one_answer(policy):
    [completions] = policy.generate([ask("hi")], n=3, sampling=GREEDY)
    assert len(completions) == 3 and len({c.text for c in completions}) == 1


def test_stop_strings_cut_the_text(policy):
    [[plain]] = policy.generate([ask("add")], sampling=GREEDY)
    # A stop string taken from the model's own greedy answer, past its first character.
    k = next(i for i in range(1, len(plain.text) - 1)
             if plain.text[i:i + 2].isascii() and plain.text[i:i + 2].isprintable())
    stop = plain.text[k:k + 2]
    [[cut]] = policy.generate([ask("add")], sampling=SamplingConfig(
        temperature=0, max_new_tokens=12, stop=[stop]))
    assert cut.text == plain.text[:plain.text.index(stop)]
    assert cut.finish_reason == "stop"
    assert cut.completion_tokens <= plain.completion_tokens


def test_batches_are_bounded(tiny):
    small = HFPolicy(HFConfig(model=str(tiny), num_threads=1, max_batch_size=3, sampling=SAMPLE))
    out = small.generate([ask(str(i)) for i in range(4)], n=2)
    assert [len(c) for c in out] == [2, 2, 2, 2]
    assert small.usage().requests == 4  # one prompt x 2 samples per batch of at most 3


def test_plan_batches():
    assert plan_batches(5, 2, 4) == [([0, 1], 2), ([2, 3], 2), ([4], 2)]
    assert plan_batches(2, 5, 4) == [([0], 4), ([0], 1), ([1], 4), ([1], 1)]
    assert plan_batches(3, 1, 16) == [([0, 1, 2], 1)]
    assert plan_batches(1, 4, 4) == [([0], 4)]


def test_a_lora_adapter_changes_the_answers(tiny, policy, tmp_path):
    pytest.importorskip("peft")
    adapter = build_lora_adapter(tiny, tmp_path / "adapter")
    tuned = HFPolicy(HFConfig(model=str(tiny), adapter=str(adapter), num_threads=1))
    prompt = [ask("add two numbers")]
    assert tuned.generate(prompt, sampling=GREEDY)[0][0].text != \
        policy.generate(prompt, sampling=GREEDY)[0][0].text
    with pytest.raises(PolicyError, match="adapter folder"):
        HFPolicy(HFConfig(model=str(tiny), adapter=str(tmp_path / "missing")))


def test_a_checkpoint_folder_loads_with_its_base(tiny, tmp_path):
    """`hf:<checkpoint>`: a trainer's adapter folder names its base (marker, or peft's own
    base_model_name_or_path); a base that is itself a checkpoint is resolved in turn."""
    pytest.importorskip("peft")
    import shutil

    from mleforge.policies.model_source import resolve_model, write_marker

    prompt = [ask("add two numbers")]
    adapter = build_lora_adapter(tiny, tmp_path / "adapter")
    explicit = HFPolicy(HFConfig(model=str(tiny), adapter=str(adapter), num_threads=1))
    expected = explicit.generate(prompt, sampling=GREEDY)[0][0].text
    plain = make_policy(f"hf:{adapter}", num_threads=1)  # peft's base_model_name_or_path
    assert plain.generate(prompt, sampling=GREEDY)[0][0].text == expected
    # the marker names the base (here a copy elsewhere), and the tokenizer travels with it
    moved = shutil.copytree(tiny, tmp_path / "moved-base")
    checkpoint = shutil.copytree(adapter, tmp_path / "checkpoint")
    write_marker(checkpoint, weights="adapter", base=f"hf:{moved}")
    assert resolve_model(f"hf:{checkpoint}").base == str(moved)
    marked = make_policy(f"hf:{checkpoint}", num_threads=1)
    assert marked.generate(prompt, sampling=GREEDY)[0][0].text == expected
    # a second adapter on top of the first: both applied, innermost first
    outer = build_lora_adapter(tiny, tmp_path / "outer")
    write_marker(outer, weights="adapter", base=f"hf:{checkpoint}")
    source = resolve_model(f"hf:{outer}")
    assert source.adapters == (str(checkpoint.resolve()), str(outer.resolve())) and source.base == str(moved)
    assert make_policy(f"hf:{outer}", num_threads=1).generate(prompt, sampling=GREEDY)[0][0].text != expected
    (checkpoint / "adapter_config.json").unlink()
    with pytest.raises(PolicyError, match="neither a model"):
        make_policy(f"hf:{checkpoint}")


def test_a_hub_id_not_in_the_cache_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(PolicyError, match="not in the local Hugging Face cache; pass download=True"):
        HFPolicy(HFConfig(model="nobody/no-such-model"))
    with pytest.raises(PolicyError, match="is not a model folder"):
        HFPolicy(HFConfig(model=str(tmp_path / "nope")))


def test_a_tokenizer_without_chat_template_is_refused(tiny, policy):
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(tiny)
    plain.chat_template = None
    with pytest.raises(PolicyError, match="no chat template"):
        HFPolicy(HFConfig(model="wrapped"), model=policy.hf_model, tokenizer=plain)


def test_make_policy_and_config(tiny):
    policy = make_policy(f"hf:{tiny}", max_batch_size=4, num_threads=1,
                         sampling={"max_new_tokens": 4})
    assert isinstance(policy, HFPolicy) and isinstance(policy, Policy) and policy.device == "cpu"
    assert policy.generate([ask("x")], states=[None])[0][0].completion_tokens <= 4
    assert HFConfig.from_dict(policy.to_dict()) == policy.config
    with pytest.raises(ConfigError, match="unknown option"):
        make_policy(f"hf:{tiny}", temperature=0.5)
    with pytest.raises(ValueError, match="dtype"):
        HFConfig(model="m", dtype="float64")
    policy.close()
    with pytest.raises(PolicyError, match="closed"):
        policy.generate([ask("x")])


def test_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(MissingExtra, match=r"mleforge\[train\]"):
        HFPolicy(HFConfig(model="anything"))


def test_how_a_row_ended_and_what_it_cost(policy):
    tokenizer = policy.tokenizer
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    eos_ids = (eos,)
    words = tokenizer.encode("import numpy", add_special_tokens=False)
    n = len(words)

    assert row_end([*words, eos, pad, pad], eos_ids, pad, stopped=False) == \
        ([*words, eos], "stop")  # the end-of-sequence token was generated: it counts
    assert row_end([*words, pad], eos_ids, pad, stopped=True) == \
        (words, "stop")  # padding after a stop string does not
    assert row_end([*words, eos], eos_ids, pad, stopped=True) == (words, "stop")
    assert row_end(words, eos_ids, pad, stopped=False) == (words, "length")
    assert row_end(words, eos_ids, pad, stopped=True) == (words, "stop")  # stopped at the end
    assert row_end([eos, pad], eos_ids, pad, stopped=False) == ([eos], "stop")

    text = lambda tokens, reason, stop=(): policy._completion(  # noqa: E731
        Sample(tuple(tokens), reason, 0.1), SamplingConfig(max_new_tokens=8, stop=stop), 5)
    by_eos = text([*words, eos], "stop")
    assert (by_eos.text, by_eos.finish_reason, by_eos.completion_tokens, by_eos.prompt_tokens) \
        == ("import numpy", "stop", n + 1, 5)
    by_stop = text(words, "stop", stop=(" numpy",))
    assert (by_stop.text, by_stop.finish_reason, by_stop.completion_tokens) == ("import", "stop", n)
    by_length = text(words, "length")
    assert (by_length.text, by_length.finish_reason, by_length.completion_tokens) == \
        ("import numpy", "length", n)
    assert text([eos], "stop").text == "" and text([eos], "stop").completion_tokens == 1


def test_a_prompt_beyond_the_context_is_refused(policy):
    with pytest.raises(PolicyError, match="exceeds .* context of 512 tokens"):
        policy.generate([ask("numpy " * 600)])
