"""The config tree's machinery: shared validators, nested frozen dataclasses from dicts and
YAML files, dotted overrides, and command-line flags generated from the dataclass fields.

A component's config is a frozen dataclass that checks its own values in `__post_init__`
with the validators here. A field's `metadata` may carry:

    help      the flag's help (the help lives with the field)
    choices   the fixed values the flag accepts
    aliases   flags that set it besides its generated one (`--model` for model.spec); on a
              field holding a nested config, a dict {subfield: flags} for that section
    negative  a flag that sets a bool field off (`--no-buffer-growth`)
    none      a word the flag reads as None besides none/null (`all` for every layer)
    repeat    a tuple field whose flag may be given again, each adding to it
    flag      False: no flag (a mapping or objects: set from a --config file only)

`add_arguments(parser, cls)` makes `--field-name` for top-level fields and `--section.field-name`
(or `--section.field_name`) for nested ones; values not given leave no attribute behind
(argparse.SUPPRESS), so `given(args)` returns only what the command line set, as a nested
dict that `merge` lays over the defaults, a preset and a `--config` file, in that order.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import types
import typing
from pathlib import Path
from typing import Any

from mleforge.errors import ConfigError

DEST = "@"  # argparse dests of generated flags: "@section.field"
NONE_WORDS = ("none", "null")
TRUE_WORDS = ("on", "true", "yes", "1")
FALSE_WORDS = ("off", "false", "no", "0")


# --- validators: each says what was wrong and what to give -------------------------------

def integer(key: str, value: Any, low: int, fix: str = "", optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{key}: got {value!r}; expected an integer >= {low}{fix}")


def number(key: str, value: Any, *, low: float | None = None, strict: bool = False, fix: str = "",
           optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}: got {value!r}; expected a finite number{fix}")
    if low is not None and (value <= low if strict else value < low):
        raise ConfigError(f"{key}: got {value!r}; expected {'>' if strict else '>='} {low}{fix}")


def probability(key: str, value: Any, *, below_one: bool = False, above_zero: bool = False) -> None:
    number(key, value, low=0.0, strict=above_zero)
    if value > 1 or (below_one and value >= 1):
        interval = f"{'(' if above_zero else '['}0, 1{')' if below_one else ']'}"
        raise ConfigError(f"{key}: got {value}; expected a probability in {interval}")


def choice(key: str, value: Any, choices: tuple[str, ...], optional: bool = False) -> None:
    if value is None and optional:
        return
    if value not in choices:
        raise ConfigError(f"{key}: got {value!r}; expected one of {', '.join(choices)}")


def flag(key: str, value: Any, optional: bool = False) -> None:
    if not (isinstance(value, bool) or (optional and value is None)):
        raise ConfigError(f"{key}: got {value!r}; expected true or false{' (or null: auto)' if optional else ''}")


def text(key: str, value: Any, fix: str, optional: bool = False) -> None:
    """A non-empty string; `fix` says what to give."""
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: {fix}")


def known(cls: type, data: dict[str, Any]) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"{cls.__name__}: unknown keys {', '.join(unknown)}; known: {', '.join(names)}")


# --- dicts <-> nested frozen dataclasses ------------------------------------------------------

@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass's fields."""
    return typing.get_type_hints(cls)


def _optional(kind: Any) -> Any:
    """X for `X | None`, else None."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(rest) == 1 and len(typing.get_args(kind)) == 2:
            return rest[0]
    return None


def _convert(kind: Any, value: Any) -> Any:
    inner = _optional(kind)
    if inner is not None:
        return None if value is None else _convert(inner, value)
    if dataclasses.is_dataclass(kind) and isinstance(value, dict):
        return from_dict(kind, value)
    if typing.get_origin(kind) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """`cls` from a nested dict: unknown keys refused with the known ones listed, nested
    configs built recursively (a section's missing keys read as the field's default section's,
    as in TrainConfig.sft's), lists made tuples where the field is a tuple."""
    if not isinstance(data, dict):
        raise ConfigError(f"{cls.__name__}: got {data!r}; expected a mapping of its settings")
    known(cls, data)
    kinds = hints(cls)
    out = {}
    for item in dataclasses.fields(cls):
        if item.name not in data:
            continue
        value = data[item.name]
        if isinstance(value, dict) and dataclasses.is_dataclass(kinds[item.name]):
            value = merge(_default_section(item), value)
        out[item.name] = _convert(kinds[item.name], value)
    return cls(**out)


def build_sections(config: Any) -> None:
    """In a frozen config's __post_init__: each section given as a dict becomes its dataclass
    (missing keys read as the field's default section's)."""
    kinds = hints(type(config))
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if isinstance(value, dict) and dataclasses.is_dataclass(kinds[item.name]):
            object.__setattr__(config, item.name, from_dict(kinds[item.name], merge(_default_section(item), value)))


def _default_section(item: dataclasses.Field) -> dict[str, Any]:
    if item.default_factory is not dataclasses.MISSING:
        return to_dict(item.default_factory())
    return {} if item.default is dataclasses.MISSING or item.default is None else to_dict(item.default)


def to_dict(config: Any) -> dict[str, Any]:
    """A config as plain YAML-safe data (tuples as lists)."""
    return _plain(dataclasses.asdict(config))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` laid on `base`: dicts merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif isinstance(value, dict) and dataclasses.is_dataclass(out.get(key)):
            out[key] = merge(to_dict(out[key]), value)
        else:
            out[key] = value
    return out


def set_dotted(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `data` with `path` ("buffer.max_states") set to `value`."""
    head, _, rest = path.partition(".")
    if not rest:
        return {**data, head: value}
    inner = data.get(head)
    return {**data, head: set_dotted(inner if isinstance(inner, dict) else {}, rest, value)}


def changed_paths(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths whose values differ between two nested dicts."""
    out = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += changed_paths(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A config file's mapping (an empty file: no settings)."""
    import yaml

    file = Path(path).expanduser()
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror}); give a YAML file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: not valid YAML ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping of settings, got {type(data).__name__}")
    return data


# --- flags from the fields ---------------------------------------------------------------------

def parse_bool(text_value: str) -> bool:
    word = text_value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"got {text_value!r}; give on or off (true or false)")


def _parser_of(kind: Any, meta: Any) -> Any:
    inner = _optional(kind)
    if inner is not None:
        # a choice named "none" (isolation none: no sandbox) is that choice; null is None
        words = tuple(w for w in (*NONE_WORDS, *([meta["none"]] if "none" in meta else []))
                      if w not in meta.get("choices", ()))
        parse_inner = _parser_of(inner, meta)
        return lambda value: None if value.strip().lower() in words else parse_inner(value)
    if typing.get_origin(kind) is tuple:
        return lambda value: tuple(part.strip() for part in value.split(",") if part.strip())
    if kind is bool:
        return parse_bool
    base = {int: int, float: float}.get(kind, str)
    choices = meta.get("choices")
    if not choices:
        return base

    def pick(value: str) -> Any:
        if value not in choices:
            raise argparse.ArgumentTypeError(f"got {value!r}; expected one of {', '.join(choices)}")
        return value
    return pick


def _metavar(kind: Any, meta: Any) -> str:
    if meta.get("choices"):
        shown = "|".join(meta["choices"])
    elif _optional(kind) is bool or kind is bool:
        shown = "on|off"
    elif typing.get_origin(kind) is tuple:
        shown = "A,B,..."
    else:
        inner = _optional(kind) or kind
        shown = {int: "N", float: "X"}.get(inner, "TEXT")
    if _optional(kind) is not None:
        shown += f"|{meta.get('none', 'null' if 'none' in meta.get('choices', ()) else 'none')}"
    return shown


def _default_text(item: dataclasses.Field) -> str:
    if item.default is not dataclasses.MISSING:
        value = item.default
    elif item.default_factory is not dataclasses.MISSING:
        value = item.default_factory()
    else:
        return ""
    if isinstance(value, tuple):
        value = ",".join(value)
    return f" (default {value})" if value is not None and value != "" else " (default none)"


def add_arguments(parser: argparse.ArgumentParser, cls: type, prefix: str = "",
                  aliases: dict[str, Any] | None = None, target: Any = None) -> None:
    """`--field-name` (and `--field_name`) for each field of `cls`, `--section.field-name` for
    the fields of nested configs (listed in a group of their own); `aliases` {field: flags}
    adds a section's aliases."""
    kinds = hints(cls)
    target = target or parser
    for item in dataclasses.fields(cls):
        kind, meta, path = kinds[item.name], item.metadata, f"{prefix}{item.name}"
        if meta.get("flag", True) is False:  # set from a --config file only (a mapping, objects)
            continue
        if dataclasses.is_dataclass(kind):
            group = parser.add_argument_group(f"{path} ({kind.__name__})")
            add_arguments(parser, kind, f"{path}.", meta.get("aliases"), group)
            continue
        names = [f"--{prefix}{item.name.replace('_', '-')}"]
        if "_" in item.name:
            names.append(f"--{path}")
        names += list(meta.get("aliases", ())) + list((aliases or {}).get(item.name, ()))
        extra: dict[str, Any] = {"nargs": "?", "const": True} if kind is bool else {}
        if meta.get("repeat"):  # a tuple given again adds to it
            extra = {"action": "extend"}
        help_text = (meta.get("help", path) + _default_text(item)).replace("%", "%%")
        target.add_argument(*names, dest=DEST + path, type=_parser_of(kind, meta), default=argparse.SUPPRESS,
                            metavar=_metavar(kind, meta), help=help_text, **extra)
        if "negative" in meta:
            target.add_argument(meta["negative"], dest=DEST + path, action="store_const", const=False,
                                default=argparse.SUPPRESS, help=f"the same as --{path.replace('_', '-')} off")


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line gave, as a nested dict."""
    out: dict[str, Any] = {}
    for dest, value in sorted(vars(args).items()):
        if dest.startswith(DEST):
            out = set_dotted(out, dest[len(DEST):], value)
    return out


def flag_paths(cls: type, prefix: str = "") -> list[str]:
    """Every dotted path a flag sets in the tree of `cls`."""
    out = []
    kinds = hints(cls)
    for item in dataclasses.fields(cls):
        if item.metadata.get("flag", True) is False:
            continue
        if dataclasses.is_dataclass(kinds[item.name]):
            out += flag_paths(kinds[item.name], f"{prefix}{item.name}.")
        else:
            out.append(f"{prefix}{item.name}")
    return out
