"""`make_policy("openai:<model>")` and friends: one string picks a policy.

Built in: `openai:<model>`, `hf:<path-or-hub-id>`, `bundled:<name>`. Others register a prefix
with `register_policy(prefix, factory)`; a factory takes the text after the colon and the keyword
arguments, and returns a `Policy`. A module that registers its prefix when imported is imported
on first use, so `make_policy("template")` works without importing it first: the one named for
the prefix in `PLUGIN_MODULES` (the offline template expert lives above this layer, in
`mleforge.expert`, and is named here only as a string), else `mleforge/policies/<prefix>.py`.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from mleforge.errors import ConfigError
from mleforge.policies.base import Policy, SamplingConfig

PolicyFactory = Callable[..., Policy]  # factory(name: str, **kwargs) -> Policy
PLUGIN_MODULES = {"template": "mleforge.expert.policy"}  # prefix -> the module that registers it
_FACTORIES: dict[str, PolicyFactory] = {}


def register_policy(prefix: str, factory: PolicyFactory, *, replace: bool = False) -> None:
    """Make `make_policy("<prefix>:<name>", **kwargs)` call `factory(name, **kwargs)`."""
    if not prefix.isidentifier():
        raise ValueError(f"a policy prefix must be a plain word, got {prefix!r}")
    if prefix in _FACTORIES and not replace and _FACTORIES[prefix] is not factory:
        raise ValueError(f"a policy factory is already registered for {prefix!r}; "
                         f"pass replace=True to override it")
    _FACTORIES[prefix] = factory


def policy_prefixes() -> list[str]:
    return sorted(_FACTORIES)


def make_policy(spec: str, **kwargs: Any) -> Policy:
    """Build a policy from `<prefix>:<name>`; `kwargs` go to that policy's config.

    `sampling=` may be a `SamplingConfig` or a dict of its fields.
    """
    prefix, _, name = spec.partition(":")
    if prefix not in _FACTORIES and prefix.isidentifier():
        _import_policy_module(prefix)
    factory = _FACTORIES.get(prefix)
    if factory is None:
        raise ConfigError(f"unknown policy {spec!r}: the prefix must be one of "
                          f"{', '.join(policy_prefixes())} (as in 'openai:gpt-4o-mini')")
    if isinstance(kwargs.get("sampling"), dict):
        kwargs["sampling"] = SamplingConfig.from_dict(kwargs["sampling"])
    return factory(name, **kwargs)


def _import_policy_module(prefix: str) -> None:
    module = PLUGIN_MODULES.get(prefix, f"{__package__}.{prefix}")
    if importlib.util.find_spec(module) is not None:
        importlib.import_module(module)


def _config_kwargs(config_cls: type, kind: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Reject keyword arguments the config does not know, naming the ones it does."""
    known = set(config_cls.__dataclass_fields__)
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ConfigError(f"{kind} policy: unknown option(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}")
    return kwargs


def _openai(name: str, **kwargs: Any) -> Policy:
    from mleforge.policies.openai import OpenAIConfig, OpenAIPolicy

    if not name:
        raise ConfigError("openai policy: name the model, as in 'openai:gpt-4o-mini'")
    return OpenAIPolicy(OpenAIConfig(model=name, **_config_kwargs(OpenAIConfig, "openai", kwargs)))


def _hf(name: str, **kwargs: Any) -> Policy:
    from mleforge.policies.hf import HFPolicy
    from mleforge.policies.hf_config import HFConfig

    if not name:
        raise ConfigError("hf policy: give a local folder or a hub id, as in 'hf:./checkpoint'")
    return HFPolicy(HFConfig(model=name, **_config_kwargs(HFConfig, "hf", kwargs)))


def _bundled(name: str, **kwargs: Any) -> Policy:
    from mleforge.policies.hf import bundled_policy

    return bundled_policy(name, **kwargs)


register_policy("openai", _openai)
register_policy("hf", _hf)
register_policy("bundled", _bundled)
