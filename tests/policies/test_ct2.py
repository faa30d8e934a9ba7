"""The ct2 engine against the transformers engine, on the tiny random Llama and on SmolLM2.

float32 conversions are compared token for token with transformers (they agree to ~1e-5 in
log-probability); int8 ones by structure and accounting. The tiny model converts in ~0.1 s;
SmolLM2's conversions go to the real model cache, so they are paid once per machine.
"""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("ctranslate2")

import torch  # noqa: E402

from mleforge.policies import PolicyError, SamplingConfig, make_policy  # noqa: E402
from mleforge.policies.engines.ct2 import Ct2Engine, refresh_engine  # noqa: E402
from mleforge.policies.engines.ct2_convert import (  # noqa: E402
    CT2_MARKER,
    _file_record,
    weights_sha256,
)
from mleforge.policies.hf import HFPolicy  # noqa: E402
from mleforge.policies.hf_config import HFConfig  # noqa: E402
from tests.policies.test_bundled_models import skip_unless_installed  # noqa: E402
from tests.policies.tiny_model import build_tiny_model, train_lora  # noqa: E402

GREEDY = SamplingConfig(temperature=0, max_new_tokens=12)
SAMPLE = SamplingConfig(temperature=1.0, max_new_tokens=12, seed=7)
ANSWER = "def add(a, b):\n    return a + b"


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You write code."}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("ct2-cache")


def local(tiny, engine: str, cache=None, **options) -> HFPolicy:
    extra = {"ct2_cache": str(cache)} if engine != "transformers" else {}
    return HFPolicy(HFConfig(model=str(tiny), engine=engine, num_threads=1, **extra, **options))


def texts(out):
    return [[c.text for c in got] for got in out]


def accounting(out):
    return [[(c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens) for c in got]
            for got in out]


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen") / "model", "qwen2")


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_float32_greedy_matches_transformers_token_for_token(architecture, tiny, tiny_qwen,
                                                             cache):
    model = {"llama": tiny, "qwen2": tiny_qwen}[architecture]
    reference = local(model, "transformers")
    fast = local(model, "ct2", cache, quantization="float32")
    prompts = [ask("add two numbers"), ask("import numpy as np and pandas as pd, then train")]
    assert accounting(fast.generate(prompts, sampling=GREEDY)) == \
        accounting(reference.generate(prompts, sampling=GREEDY))

    # A stop string from the greedy answer, past its first character: both cut there, and
    # both count the tokens up to the one that completed it.
    [[plain]] = reference.generate(prompts[:1], sampling=GREEDY)
    k = next(i for i in range(1, len(plain.text) - 1)
             if plain.text[i:i + 2].isascii() and plain.text[i:i + 2].isprintable())
    stop = plain.text[k:k + 2]
    stopping = SamplingConfig(temperature=0, max_new_tokens=12, stop=[stop])
    [[cut]] = fast.generate(prompts[:1], sampling=stopping)
    assert cut.text == plain.text[:plain.text.index(stop)] and cut.finish_reason == "stop"
    assert accounting([[cut]]) == accounting(reference.generate(prompts[:1], sampling=stopping))
    assert cut.completion_tokens < plain.completion_tokens


def test_samples_have_the_structure_and_accounting_of_transformers(tiny, cache):
    policy = local(tiny, "ct2", cache, sampling=SAMPLE)  # int8, the CPU default
    assert policy.to_dict()["engine_used"]["quantization"] == "int8"
    prompts = [ask("add two numbers"), ask("import pandas as pd and numpy as np")]
    out = policy.generate(prompts, n=3)
    assert [len(got) for got in out] == [3, 3]
    for prompt, got in zip(prompts, out):
        expected = len(policy.tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
        for c in got:
            assert c.prompt_tokens == expected and c.model == str(tiny) and c.latency_s > 0
            assert 1 <= c.completion_tokens <= 12 and c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert c.completion_tokens == 12
    assert len({c.text for c in out[0]}) > 1  # samples differ
    usage = policy.usage()
    # The prompts differ by fewer than RAGGED_TOKENS tokens: one batch, each prefilled once.
    assert (usage.requests, usage.completions) == (1, 6)
    assert usage.prompt_tokens == out[0][0].prompt_tokens + out[1][0].prompt_tokens
    assert usage.completion_tokens == sum(c.completion_tokens for got in out for c in got)
    [copies] = policy.generate([ask("hi")], n=3, sampling=GREEDY)
    assert len(copies) == 3 and len({c.text for c in copies}) == 1
    assert policy.usage().completions == 7  # greedy: computed once


def test_seeded_calls_repeat_whatever_ran_before(tiny, cache):
    first, again = local(tiny, "ct2", cache, sampling=SAMPLE), local(tiny, "ct2", cache, sampling=SAMPLE)
    prompts = [ask("add two numbers")]
    a1, a2 = first.generate(prompts, n=2), first.generate(prompts, n=2)
    again.generate([ask("something else entirely")], n=4, sampling=SamplingConfig(
        max_new_tokens=12, seed=3))
    b2 = again.generate(prompts, n=2)  # its second call, after a different first one
    assert texts(b2) == texts(a2) and texts(a1) != texts(a2)
    other = first.generate(prompts, n=2, sampling=SamplingConfig(max_new_tokens=12, seed=8))
    assert texts(other) != texts(a1)

    engine, ids = first.engine, [first.prompt_ids(prompts[0])]
    once = engine.generate(ids, 3, SAMPLE, seed=11, logprobs=True)
    engine.generate(ids, 2, SAMPLE, seed=12)
    twice = engine.generate(ids, 3, SAMPLE, seed=11, logprobs=True)
    drawn = lambda g: [[(s.token_ids, s.logprobs) for s in got] for got in g.samples]  # noqa: E731
    assert drawn(once) == drawn(twice)
    for sample in once.samples[0]:
        assert len(sample.logprobs) == len(sample.token_ids)
        assert all(lp <= 0 for lp in sample.logprobs)


def test_logprobs_are_the_models_at_temperature_one(tiny, cache):
    """float32 ct2 scores a sampled sequence as the transformers model does, within 1e-4."""
    policy = local(tiny, "ct2", cache, quantization="float32")
    reference = local(tiny, "transformers").hf_model
    ids = policy.prompt_ids(ask("add two numbers"))
    [[sample]] = policy.engine.generate([ids], 1, SamplingConfig(temperature=0.7, max_new_tokens=8),
                                        seed=1, logprobs=True).samples
    with torch.no_grad():
        logits = reference(torch.tensor([ids + list(sample.token_ids)])).logits[0, len(ids) - 1:-1]
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(sample.logprobs), expected, atol=1e-4)


def test_a_trained_lora_adapter_survives_conversion(tiny, cache, tmp_path):
    pytest.importorskip("peft")
    prompt = [ask("add two numbers")]
    tuned, _ = train_lora(tiny, prompt[0], ANSWER)
    tuned.save_pretrained(tmp_path / "adapter")
    adapter = str(tmp_path / "adapter")
    greedy = SamplingConfig(temperature=0, max_new_tokens=24)  # room for the whole answer
    [[base]] = local(tiny, "transformers").generate(prompt, sampling=greedy)
    [[reference]] = local(tiny, "transformers", adapter=adapter).generate(prompt, sampling=greedy)
    [[fast]] = local(tiny, "ct2", cache, adapter=adapter, quantization="float32").generate(
        prompt, sampling=greedy)
    assert reference.text == ANSWER and base.text != ANSWER  # training changed the answer
    assert accounting([[fast]]) == accounting([[reference]])  # and conversion kept the change


def test_in_memory_conversion_leaves_the_model_alone_and_syncs(tiny):
    pytest.importorskip("peft")
    prompt = ask("add two numbers")
    model, tokenizer = train_lora(tiny, prompt, ANSWER)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    # int8 is the conversion that scales float32 weights in place; it must work on copies.
    Ct2Engine.from_model(model, tokenizer, quantization="int8").close()
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    assert all(hasattr(layer, "self_attn") for layer in model.get_base_model().model.layers)

    engine, first = refresh_engine(model, tokenizer, quantization="float32", num_threads=1)
    assert first.quantization == "float32" and first.bytes > 0
    policy = HFPolicy(HFConfig(model="trainer", engine="transformers"), model=model,
                      tokenizer=tokenizer)
    ids = policy.prompt_ids(prompt)

    def greedy(e):
        return list(e.generate([ids], 1, GREEDY, seed=0).samples[0][0].token_ids)

    assert greedy(engine) == greedy(policy.engine)
    with torch.no_grad():  # an "optimizer step" that changes the answer
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(-1.0)
    assert greedy(engine) != greedy(policy.engine)  # stale until synced
    old = engine.folder
    same, report = refresh_engine(model, tokenizer, engine)
    assert same is engine
    assert greedy(engine) == greedy(policy.engine)
    assert not old.exists() and engine.folder.is_dir()
    assert report.convert_s > 0 and report.load_s > 0 and report.bytes > 0
    assert report.to_dict()["total_s"] == pytest.approx(report.convert_s + report.load_s)
    engine.close()
    assert not engine.folder.exists()


def test_a_float_conversion_shares_the_weights_and_merges_lora_into_copies(tiny):
    """No second copy of the model where the conversion changes nothing in place: the copy's
    tensors are the model's own, but for the LoRA layers' merged weights (new tensors, the
    adapter's delta added); an integer quantization copies all."""
    from mleforge.policies.engines.ct2_convert import _base_model, _detached_copy

    pytest.importorskip("peft")
    model, _ = train_lora(tiny, ask("add two numbers"), ANSWER)
    base = _base_model(model)
    before = {name: p.data_ptr() for name, p in base.named_parameters()}
    shared = _detached_copy(base, copy_tensors=False)
    merged = set()
    for name, p in shared.named_parameters():
        original = name.replace(".weight", ".base_layer.weight")
        if original in before and original != name:  # a LoRA layer, merged
            merged.add(name)
            assert p.data_ptr() != before[original]
            assert not torch.equal(p, base.get_parameter(original))  # the trained delta is in it
        else:
            assert p.data_ptr() == before[name], name
    assert merged  # the tiny model's LoRA adapts some layers
    copied = _detached_copy(base, copy_tensors=True)
    assert not {p.data_ptr() for p in copied.parameters()} & set(before.values())


def test_a_failed_conversion_or_load_leaves_no_folder_behind(tiny, tmp_path, monkeypatch):
    """A conversion that dies half-written (a full disk: 2 GB a float32 Qwen-0.5B) or a load
    that fails leaves nothing in temp_root but the one folder the engine still owns."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import mleforge.policies.engines.ct2 as ct2_engine

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    real_convert = ct2_engine.convert_model

    def half_written(model, tokenizer, folder, quantization):
        (folder / "model.bin").write_bytes(b"half a model")
        raise OSError(28, "No space left on device")

    root = tmp_path / "scratch"
    monkeypatch.setattr(ct2_engine, "convert_model", half_written)
    with pytest.raises(OSError, match="No space left"):
        Ct2Engine.from_model(model, tokenizer, quantization="float32", num_threads=1, temp_root=root)
    assert list(root.iterdir()) == []

    monkeypatch.setattr(ct2_engine, "convert_model", real_convert)
    engine = Ct2Engine.from_model(model, tokenizer, quantization="float32", num_threads=1, temp_root=root)
    first = engine.folder
    monkeypatch.setattr(ct2_engine, "convert_model", half_written)
    with pytest.raises(OSError, match="No space left"):
        engine.sync(model)
    assert list(root.iterdir()) == [first]  # the engine still runs on its old weights
    assert engine.generate([[1, 2, 3]], 1, GREEDY, seed=0).samples[0][0].token_ids

    monkeypatch.setattr(ct2_engine, "convert_model", real_convert)
    real_ct2 = engine._ct2

    class Unloadable:
        __version__ = real_ct2.__version__

        @staticmethod
        def Generator(*args, **kwargs):  # noqa: N802 (ctranslate2's name)
            raise RuntimeError("unsupported model file")

    monkeypatch.setattr(engine, "_ct2", Unloadable)
    with pytest.raises(PolicyError, match="cannot load the model"):
        engine.sync(model)
    (second,) = root.iterdir()  # the new conversion, owned; the old one gone
    assert second != first and engine.folder == second
    engine.close()
    assert list(root.iterdir()) == []


def test_a_corrupt_conversion_is_detected_and_rebuilt(tiny, tmp_path, caplog):
    cache = tmp_path / "ct2"
    first = local(tiny, "ct2", cache, quantization="float32")
    expected = texts(first.generate([ask("hi")], sampling=GREEDY))
    folder = first.engine.folder
    assert first.to_dict()["engine_used"]["converted_now"] is True
    assert local(tiny, "ct2", cache, quantization="float32").engine.conversion.built is False

    def rebuilt(damage) -> bool:
        damage(folder)
        with caplog.at_level(logging.WARNING):
            policy = local(tiny, "ct2", cache, quantization="float32")
        assert policy.engine.folder == folder
        assert texts(policy.generate([ask("hi")], sampling=GREEDY)) == expected
        return policy.engine.conversion.built

    def truncate(f):
        data = (f / "model.bin").read_bytes()
        (f / "model.bin").write_bytes(data[:len(data) // 2])

    def zero_the_start(f):  # same size, first block zeroed
        with open(f / "model.bin", "r+b") as out:
            out.write(bytes(4096))

    def unfinished(f):  # as a conversion killed before its marker was written
        (f / CT2_MARKER).unlink()

    def garbage_with_a_matching_marker(f):  # passes the checks, fails to load
        (f / "model.bin").write_bytes(os.urandom(20_000))
        marker = json.loads((f / CT2_MARKER).read_text())
        marker["files"]["model.bin"] = _file_record(f / "model.bin")
        (f / CT2_MARKER).write_text(json.dumps(marker))

    for damage in (truncate, zero_the_start, unfinished, garbage_with_a_matching_marker):
        assert rebuilt(damage), damage.__name__
    assert "model.bin changed since it was written" in caplog.text
    assert "no marker: never completed" in caplog.text
    assert "failed to load" in caplog.text

    stale = cache / f".{folder.name}.abc.partial"  # left by a killed conversion
    stale.mkdir()
    os.utime(stale, (time.time() - 7200,) * 2)
    rebuilt(unfinished)
    assert not stale.exists()
    assert sorted(p.name for p in cache.iterdir()) == ["hashes.json", folder.name]


def test_the_cache_key_follows_the_weights(tiny, tmp_path, monkeypatch):
    from mleforge.policies.engines import ct2_convert

    model = tmp_path / "model"
    model.mkdir()
    for path in tiny.iterdir():
        (model / path.name).write_bytes(path.read_bytes())
    memo = tmp_path / "hashes.json"
    digest = weights_sha256(model, None, memo)

    def no_hashing(path):
        raise AssertionError(f"{path} was hashed again")

    monkeypatch.setattr(ct2_convert, "_sha256", no_hashing)
    assert weights_sha256(model, None, memo) == digest  # remembered by path, size, inode, mtime
    for name in ("optimizer.pt", "training_args.bin", "trainer_state.json"):  # checkpoint extras
        (model / name).write_bytes(b"state")
    assert weights_sha256(model, None, memo) == digest
    monkeypatch.undo()
    (model / "model.safetensors").write_bytes((model / "model.safetensors").read_bytes() + b" ")
    assert weights_sha256(model, None, memo) != digest


def test_auto_takes_ct2_and_says_why(tiny, cache, caplog):
    with caplog.at_level(logging.INFO, logger="mleforge.policies.hf"):
        policy = make_policy(f"hf:{tiny}", engine="auto", ct2_cache=str(cache), num_threads=1)
    used = policy.to_dict()["engine_used"]
    assert used["engine"] == "ct2" and "converts LlamaConfig models" in used["reason"]
    assert "generates with the ct2 engine" in caplog.text
    assert HFConfig.from_dict(policy.to_dict()) == policy.config
    with pytest.raises(PolicyError, match="holds no transformers model"):
        _ = policy.hf_model
    trainer = local(tiny, "transformers")
    wrapped = HFPolicy(HFConfig(model="trainer", engine="auto"), model=trainer.hf_model,
                       tokenizer=trainer.tokenizer)
    assert wrapped.choice.name == "transformers" and "in memory" in wrapped.choice.reason


def test_a_prompt_beyond_the_context_is_refused(tiny, cache):
    with pytest.raises(PolicyError, match="exceeds .* context of 512 tokens"):
        local(tiny, "ct2", cache).generate([ask("numpy " * 600)])


# --- the bundled SmolLM2 ---


@pytest.mark.slow
@skip_unless_installed("smollm2-135m")
def test_smollm2_on_ct2_as_on_transformers(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=16, seed=0)
    prompts = [ask("Write a Python function that adds two numbers."),
               ask("Read train.csv with pandas and fit a logistic regression.")]
    reference = make_policy("bundled:smollm2-135m", num_threads=1, sampling=sampling)
    fast = make_policy("bundled:smollm2-135m", engine="ct2", num_threads=1, sampling=sampling)
    assert fast.to_dict()["engine_used"]["quantization"] == "int8"
    slow_out, fast_out = reference.generate(prompts, n=2), fast.generate(prompts, n=2)
    for engine_out in (slow_out, fast_out):
        assert [len(got) for got in engine_out] == [2, 2]
        for c in (c for got in engine_out for c in got):
            assert c.text.strip() and c.model == "smollm2-135m"
            assert 1 <= c.completion_tokens <= 16
            assert (c.finish_reason == "length") == (c.completion_tokens == 16) or \
                c.finish_reason == "stop"
    assert [[c.prompt_tokens for c in got] for got in fast_out] == \
        [[c.prompt_tokens for c in got] for got in slow_out]
    usage = fast.usage()
    assert usage.completions == 4
    assert usage.completion_tokens == sum(c.completion_tokens for got in fast_out for c in got)

    again = make_policy("bundled:smollm2-135m", engine="ct2", num_threads=1, sampling=sampling)
    assert texts(again.generate(prompts, n=2)) == texts(fast_out)  # the same seed, the same text
    assert texts(fast.generate(prompts, n=2)) != texts(fast_out)  # a new call, new samples
    for policy in (reference, fast, again):
        policy.close()
