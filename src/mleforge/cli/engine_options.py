"""`--engine` and `--quantization`: how a command lets its local-model policy pick its engine.

For the commands that run a policy (run, eval, collect, train):

    add_engine_arguments(parser)
    options = {**other_options, **engine_options(args, args.policy)}   # -> make_policy(...)

`--engine auto` (the default) takes the ct2 engine where ctranslate2 is installed and converts
the model, else transformers; the policy logs which it took and why. Only `hf:` and `bundled:`
policies have engines; asking another policy for one is an error, not silently ignored.
"""

from __future__ import annotations

import argparse
from typing import Any

from mleforge.errors import ConfigError
from mleforge.policies.engines.base import ENGINE_CHOICES, QUANTIZATIONS

LOCAL_PREFIXES = ("hf", "bundled")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("local models (hf:, bundled:)")
    group.add_argument(
        "--engine", choices=ENGINE_CHOICES, default="auto",
        help="what generates: ct2 (CTranslate2, int8 on a CPU, several times faster; "
             "pip install 'mleforge[fast]'), transformers, or auto (ct2 where it is installed "
             "and converts the model) [default: auto]")
    group.add_argument(
        "--quantization", choices=QUANTIZATIONS, default=None,
        help="the ct2 engine's weight type [default: int8 on a CPU, float16 on a GPU]")


def engine_options(args: argparse.Namespace, policy: str) -> dict[str, Any]:
    """The make_policy options that `args.engine` and `args.quantization` give `policy`."""
    engine = getattr(args, "engine", "auto")
    quantization = getattr(args, "quantization", None)
    if policy.partition(":")[0] not in LOCAL_PREFIXES:
        if engine != "auto" or quantization is not None:
            raise ConfigError(f"--engine and --quantization apply to local models (hf:, "
                              f"bundled:), not to {policy!r}")
        return {}
    if engine == "transformers" and quantization is not None:
        raise ConfigError("--quantization applies to the ct2 engine; drop it or use "
                          "--engine ct2 (or auto)")
    options: dict[str, Any] = {"engine": engine}
    if quantization is not None:
        options["quantization"] = quantization
    return options
