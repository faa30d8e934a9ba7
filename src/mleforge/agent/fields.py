"""What every agent record shares: its error and the readers its from_dict uses.

The agent's records (ExecutionSummary, Node, Journal, State) are frozen dataclasses
with `to_dict`/`from_dict`, and `from_dict(to_dict(x)) == x` exactly after a JSON
round trip: these records cross every boundary (the state buffer in SQLite,
journals on disk, verl parquet), so they hold only JSON values (str, int, float,
bool, None, lists, dicts with str keys). A malformed record names the key at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mleforge.errors import MleforgeError


class RecordError(MleforgeError):
    """A node, journal or state is inconsistent, or its serialized form is malformed."""


def read_field(data: Mapping[str, Any], key: str, kinds: tuple[type, ...], what: str, optional: bool = False) -> Any:
    if not isinstance(data, Mapping):
        raise RecordError(f"{what}: expected a JSON object; got {type(data).__name__}")
    if key not in data:
        if optional:
            return None
        raise RecordError(f"{what}: missing key `{key}`")
    value = data[key]
    if value is None and optional:
        return None
    # bool is an int in Python: reject it where a number is expected.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise RecordError(f"{what}: key `{key}` is {value!r}; expected {names}")
    return value


def read_number(data: Mapping[str, Any], key: str, what: str, optional: bool = False) -> float | None:
    value = read_field(data, key, (int, float), what, optional)
    return None if value is None else float(value)
