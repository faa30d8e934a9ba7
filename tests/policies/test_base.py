"""The shared records, helpers and the `make_policy` registry."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import mleforge.policies as policies
from mleforge.errors import ConfigError
from mleforge.policies import Completion, Policy, SamplingConfig, make_policy, register_policy
from mleforge.policies import registry as registry_module
from mleforge.policies.base import (
    UsageMeter,
    check_request,
    cut_at_stop,
    derive_seed,
    split_evenly,
)


def test_sampling_config_validates_and_round_trips():
    config = SamplingConfig(temperature=0.5, top_p=0.9, max_new_tokens=64, seed=None, stop=["```"])
    assert config.stop == ("```",)
    assert SamplingConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert SamplingConfig(stop="\n").stop == ("\n",)
    assert SamplingConfig(temperature=0).greedy
    for bad in ({"temperature": -0.1}, {"temperature": 3}, {"top_p": 0}, {"top_p": 1.5},
                {"max_new_tokens": 0}, {"max_new_tokens": 2.5}, {"max_new_tokens": True},
                {"seed": "1"}, {"stop": [""]}, {"stop": [3]}):
        with pytest.raises(ValueError):
            SamplingConfig(**bad)


def test_completion_round_trip():
    c = Completion("print(1)", "stop", 10, 3, 0.25, "m")
    assert Completion.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_check_request_explains_what_is_wrong():
    ok = check_request([[{"role": "user", "content": "hi", "name": "x"}]], 2)
    assert ok == [[{"role": "user", "content": "hi"}]]
    with pytest.raises(ValueError, match="n must be a positive integer"):
        check_request([[{"role": "user", "content": "hi"}]], 0)
    with pytest.raises(TypeError, match="list of prompts"):
        check_request("hi", 1)
    with pytest.raises(TypeError, match="prompt 0 must be a non-empty list"):
        check_request([{"role": "user", "content": "hi"}], 1)
    with pytest.raises(ValueError, match="prompt 1: each message needs a role"):
        check_request([[{"role": "user", "content": "a"}], [{"role": "robot", "content": "b"}]], 1)


def test_helpers():
    assert cut_at_stop("a```b\n\nc", ["\n\n", "```"]) == ("a", True)
    assert cut_at_stop("abc", ["x"]) == ("abc", False)
    assert split_evenly(10, [1, 1, 1]) == [4, 3, 3]
    assert split_evenly(7, [0, 0]) == [4, 3]
    assert split_evenly(12, [10, 20, 30]) == [2, 4, 6]
    assert split_evenly(5, []) == []
    assert derive_seed(0, 1) == derive_seed(0, 1) != derive_seed(0, 2)
    assert derive_seed(None, 1) is None


def test_usage_meter_totals():
    meter = UsageMeter()
    meter.add(requests=1, completions=2, prompt_tokens=10, completion_tokens=6, latency_s=0.5)
    meter.add(retries=1)
    usage = meter.snapshot()
    assert (usage.requests, usage.retries, usage.completions, usage.total_tokens) == (1, 1, 2, 16)
    assert usage.to_dict()["total_tokens"] == 16


class EchoPolicy:
    """A minimal policy, as a colleague's template expert would register one."""

    def __init__(self, name: str, **options):
        self.name, self.options = name, options

    @property
    def model(self) -> str:
        return self.name

    def generate(self, prompts, n=1, sampling=None, *, states=None):
        return [[Completion(p[-1]["content"], "stop", 0, 0, 0.0, self.name)] * n for p in prompts]

    def usage(self):
        return UsageMeter().snapshot()

    def close(self):
        pass


def test_register_and_make_a_policy():
    register_policy("echo", EchoPolicy)
    try:
        policy = make_policy("echo:x", flavour="plain")
        assert isinstance(policy, Policy)  # the protocol is structural
        assert policy.options == {"flavour": "plain"}
        assert policy.generate([[{"role": "user", "content": "hi"}]], n=2)[0][1].text == "hi"
        register_policy("echo", EchoPolicy)  # the same factory again is fine
        with pytest.raises(ValueError, match="already registered"):
            register_policy("echo", lambda name: None)
    finally:
        registry_module._FACTORIES.pop("echo")


def test_a_policy_module_registers_itself_on_first_use(tmp_path, monkeypatch):
    (tmp_path / "selfreg.py").write_text(
        "from mleforge.policies import register_policy\n"
        "from tests.policies.test_base import EchoPolicy\n"
        "register_policy('selfreg', EchoPolicy)\n")
    monkeypatch.setattr(policies, "__path__", [*policies.__path__, str(tmp_path)])
    try:
        assert make_policy("selfreg:y").model == "y"
    finally:
        registry_module._FACTORIES.pop("selfreg", None)
        sys.modules.pop("mleforge.policies.selfreg", None)


def test_unknown_prefixes_and_options_are_config_errors():
    with pytest.raises(ConfigError, match="prefix must be one of bundled, hf, openai"):
        make_policy("nonsense:x")
    with pytest.raises(ConfigError, match="name the model"):
        make_policy("openai:")
    with pytest.raises(ConfigError, match="unknown option.*temprature"):
        make_policy("openai:m", temprature=0.2)


def test_importing_policies_stays_light():
    # torch and transformers load with a local model, never with the package.
    code = ("import sys, mleforge.policies, mleforge.policies.openai, mleforge.policies.bundled; "
            "print(any(m in sys.modules for m in ('torch', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
