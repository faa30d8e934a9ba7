"""`--engine` / `--quantization` parse and map into make_policy options."""

from __future__ import annotations

import argparse

import pytest

from mleforge.cli.engine_options import add_engine_arguments, engine_options
from mleforge.errors import ConfigError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_and_mapping():
    assert engine_options(parse(), "bundled:qwen2.5-coder-0.5b") == {"engine": "auto"}
    assert engine_options(parse("--engine", "ct2", "--quantization", "float32"), "hf:./ckpt") == \
        {"engine": "ct2", "quantization": "float32"}
    assert engine_options(parse(), "openai:gpt-4o-mini") == {}
    assert engine_options(parse(), "template") == {}


def test_bad_combinations_are_refused():
    with pytest.raises(ConfigError, match="apply to local models"):
        engine_options(parse("--engine", "ct2"), "openai:gpt-4o-mini")
    with pytest.raises(ConfigError, match="applies to the ct2 engine"):
        engine_options(parse("--engine", "transformers", "--quantization", "int8"), "hf:x")
    with pytest.raises(SystemExit):
        parse("--engine", "vllm")
