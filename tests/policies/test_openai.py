"""The OpenAI-compatible policy against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from mleforge.policies import Policy, SamplingConfig, make_policy
from mleforge.policies.openai import EndpointError, OpenAIConfig, OpenAIPolicy
from tests.policies.chat_server import ChatServer, Reply, run_in_threads

KEY = "sk-test-Zq81kLmN0pQrStUvWxYz"  # looks like a real key; must never leak
KEY_ENV = "MLEFORGE_TEST_KEY"


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


@pytest.fixture(autouse=True)
def env(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # a proxy must not see test traffic
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def policy_for(server: ChatServer, **overrides) -> OpenAIPolicy:
    options = {"model": "test-model", "base_url": server.url, "api_key_env": KEY_ENV,
               "backoff_s": 0.01, "timeout_s": 5.0, **overrides}
    return OpenAIPolicy(OpenAIConfig(**options))


def test_n_samples_per_prompt_with_usage_and_auth_header():
    with ChatServer() as server, policy_for(server) as policy:
        sampling = SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=32, seed=3,
                                  stop=["\n\n"])
        out = policy.generate([ask("one two"), ask("three")], n=3, sampling=sampling)

    assert [len(c) for c in out] == [3, 3]
    assert [c.text for c in out[0]] == [f"answer {k} to one two" for k in range(3)]
    first = out[0][0]
    assert first.model == "test-model" and first.finish_reason == "stop"
    assert first.prompt_tokens == 4  # "Be brief." + "one two"
    assert sum(c.completion_tokens for c in out[0]) == 12  # the request's total, shared out
    assert first.latency_s > 0

    assert len(server.seen) == 2  # one request per prompt, n in the body
    request = server.seen[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.body["n"] == 3 and request.body["max_tokens"] == 32
    assert request.body["temperature"] == 0.7 and request.body["top_p"] == 0.9
    assert request.body["stop"] == ["\n\n"] and isinstance(request.body["seed"], int)

    usage = policy.usage()
    assert usage.requests == 2 and usage.completions == 6 and usage.retries == 0
    assert usage.prompt_tokens == 4 + 3 and usage.completion_tokens == 24
    assert usage.total_tokens == 31


def test_no_key_in_the_environment_sends_no_authorization(monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    with ChatServer() as server, policy_for(server) as policy:
        policy.generate([ask("hi")])
    assert "Authorization" not in server.seen[0].headers


def test_server_errors_are_retried_until_success():
    script = [Reply(503, "overloaded"), Reply(503, "overloaded")]
    with ChatServer(script=script) as server, policy_for(server) as policy:
        [[completion]] = policy.generate([ask("hi")])
    assert completion.text == "answer 0 to hi"
    assert len(server.seen) == 3
    assert policy.usage().retries == 2 and policy.usage().requests == 1


def test_retry_after_is_honored():
    script = [Reply(429, "slow down", headers={"Retry-After": "1"})]
    with ChatServer(script=script) as server, policy_for(server, backoff_s=0.001) as policy:
        started = time.perf_counter()
        policy.generate([ask("hi")])
        waited = time.perf_counter() - started
    assert len(server.seen) == 2
    assert 0.95 <= waited < 5


def test_retries_give_up_with_the_last_reason():
    script = [Reply(500, "boom")] * 3
    expected = r"after 3 attempt\(s\); last: HTTP 500: boom"
    with ChatServer(script=script) as server, policy_for(server, max_retries=2) as policy, \
            pytest.raises(EndpointError, match=expected) as err:
        policy.generate([ask("hi")])
    assert err.value.status == 500 and len(server.seen) == 3


def test_unauthorized_names_the_variable_and_is_not_retried():
    with ChatServer(required_key="the-right-key") as server, policy_for(server) as policy, \
            pytest.raises(EndpointError) as err:
        policy.generate([ask("hi")])
    message = str(err.value)
    assert err.value.status == 401 and len(server.seen) == 1
    assert f"check the key in ${KEY_ENV}" in message
    assert "Incorrect API key provided" in message  # the server's own words...
    assert KEY not in message  # ...without the key it echoed


def test_unknown_model_says_which_model_and_where():
    with ChatServer() as server, policy_for(server, model="nope") as policy, \
            pytest.raises(EndpointError) as err:
        policy.generate([ask("hi")])
    assert err.value.status == 404
    assert f"model 'nope' not served at {server.url}" in str(err.value)
    assert "does not exist" in str(err.value)


def test_a_slow_server_times_out():
    script = [Reply(delay_s=2.0), Reply(delay_s=2.0)]
    with ChatServer(script=script) as server, \
            policy_for(server, timeout_s=0.3, max_retries=1) as policy:
        started = time.perf_counter()
        with pytest.raises(EndpointError, match=r"no answer within 0.3s") as err:
            policy.generate([ask("hi")])
        assert time.perf_counter() - started < 1.9  # gave up before the server answered
    assert err.value.status is None


def test_a_timeout_is_retried():
    with ChatServer(script=[Reply(delay_s=1.0)]) as server, \
            policy_for(server, timeout_s=0.3) as policy:
        [[completion]] = policy.generate([ask("hi")])
    assert completion.text == "answer 0 to hi" and policy.usage().retries == 1


def test_connection_refused_is_retried_then_reported():
    with ChatServer() as server:
        url = server.url
    policy = OpenAIPolicy(OpenAIConfig(model="m", base_url=url, backoff_s=0.01, max_retries=2))
    with pytest.raises(EndpointError, match="cannot connect"):
        policy.generate([ask("hi")])
    assert policy.usage().retries == 2


def test_fewer_choices_than_n_falls_back_to_separate_requests():
    with ChatServer(max_choices=1) as server, policy_for(server) as policy:
        out = policy.generate([ask("a"), ask("b")], n=3)
        assert [len(c) for c in out] == [3, 3]
        assert {c.text for c in out[1]} == {"answer 0 to b"}
        first_call = [s.body.get("n") for s in server.seen]
        assert first_call.count(3) == 2 and first_call.count(None) == 4
        seeds = [s.body["seed"] for s in server.seen]
        assert len(set(seeds)) == len(seeds)  # separate requests must not repeat one sample

        server.seen.clear()
        policy.generate([ask("c")], n=2)  # now known to ignore n: straight to one per request
        assert [s.body.get("n") for s in server.seen] == [None, None]


def test_concurrency_never_exceeds_the_limit():
    with ChatServer(delay_s=0.15) as server, policy_for(server, max_concurrency=2) as policy:
        prompts = [ask(f"q{i}") for i in range(6)]
        run_in_threads(3, lambda _: policy.generate(prompts))  # three callers share the limit
    assert server.max_in_flight == 2  # reached, never passed
    assert len(server.seen) == 18


def test_seeds_repeat_across_runs_and_differ_across_calls():
    with ChatServer() as server:
        for _ in range(2):
            with policy_for(server) as policy:
                policy.generate([ask("a")])
                policy.generate([ask("a")])
        seeds = [s.body["seed"] for s in server.seen]
    assert seeds[0] == seeds[2] and seeds[1] == seeds[3] and seeds[0] != seeds[1]


def test_the_key_never_leaks(caplog, tmp_path):
    # The server echoes the key in its error messages: in retried 500s and in the final 401.
    script = [Reply(500, f"internal error for Bearer {KEY}"), Reply(401, f"bad key {KEY}")]
    caplog.set_level(logging.DEBUG)
    with ChatServer(script=script) as server, policy_for(server) as policy:
        with pytest.raises(EndpointError) as err:
            policy.generate([ask("hi")])
        texts = [str(err.value), repr(err.value), repr(policy), str(policy),
                 json.dumps(policy.to_dict()), repr(policy.config), str(vars(policy)),
                 caplog.text]
    assert "check the key" in str(err.value) and "bad key ***" in str(err.value)
    for text in texts:
        assert KEY not in text


def test_passing_the_key_as_the_variable_name_is_refused_without_echoing_it():
    with pytest.raises(ValueError) as err:
        OpenAIConfig(model="m", api_key_env=KEY)
    assert KEY not in str(err.value) and "NAME of an environment variable" in str(err.value)


def test_config_round_trip_and_validation():
    config = OpenAIConfig(model="m", sampling={"temperature": 0.2, "stop": ["x"]})
    assert OpenAIConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="max_concurrency"):
        OpenAIConfig(model="m", max_concurrency=0)
    with pytest.raises(ValueError, match="base_url"):
        OpenAIConfig(model="m", base_url="localhost:8000")


def test_make_policy_builds_an_openai_policy(monkeypatch):
    with ChatServer() as server:
        policy = make_policy("openai:test-model", base_url=server.url, api_key_env=KEY_ENV,
                             sampling={"max_new_tokens": 8})
        assert isinstance(policy, OpenAIPolicy) and isinstance(policy, Policy)
        assert policy.generate([ask("x")], states=[{"ignored": True}])[0][0].text == "answer 0 to x"
        assert server.seen[0].body["max_tokens"] == 8
        policy.close()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://example.invalid/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert make_policy("openai:m").config.base_url == "http://example.invalid/v1"


def test_a_remote_endpoint_without_a_key_is_refused_at_once(monkeypatch):
    from mleforge.policies.base import PolicyError
    from mleforge.policies.openai import is_local_endpoint

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(PolicyError, match=r"no API key for https://api.openai.com/v1: \$OPENAI_API_KEY is not set"):
        make_policy("openai:gpt-4o-mini")
    with pytest.raises(PolicyError, match=r"\$MY_KEY is not set"):
        OpenAIPolicy(OpenAIConfig(model="m", base_url="https://llm.example.com/v1", api_key_env="MY_KEY"))
    # Local servers need no key.
    for url in ("http://localhost:8000/v1", "http://127.0.0.1:8000/v1", "http://[::1]:8000/v1",
                "http://10.0.0.7:8000/v1", "http://192.168.1.20/v1", "http://vllm:8000/v1"):
        assert is_local_endpoint(url), url
        OpenAIPolicy(OpenAIConfig(model="m", base_url=url)).close()
    for url in ("https://api.openai.com/v1", "http://8.8.8.8/v1", "https://llm.example.com/v1"):
        assert not is_local_endpoint(url), url


def test_close_is_idempotent_and_the_policy_reopens():
    with ChatServer() as server:
        policy = policy_for(server)
        policy.generate([ask("a")])
        policy.close()
        policy.close()
        assert policy.generate([ask("b")])[0][0].text == "answer 0 to b"
        policy.close()
    assert threading.active_count() < 50
