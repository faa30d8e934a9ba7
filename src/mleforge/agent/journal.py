"""The tree of attempts of one run, saved as JSON (atomically).

Like every agent record it is a frozen dataclass with `to_dict`/`from_dict`, and
`from_dict(to_dict(x)) == x` exactly after a JSON round trip (fields.py says why).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from mleforge.agent.fields import RecordError, read_field
from mleforge.agent.node import Node

DIRECTIONS = ("higher", "lower")
JOURNAL_FORMAT = "mleforge-journal"
JOURNAL_VERSION = 1


@dataclass(frozen=True)
class Journal:
    """The tree of attempts of one run, in the order they were made.

    Immutable: `add` returns a new Journal, so a State can keep the journal
    "as it was" without copying. A parent always comes before its children.
    """

    task_id: str
    direction: str  # "higher" or "lower" is better, as the task's metric
    nodes: tuple[Node, ...] = ()

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise RecordError(f"journal direction must be higher or lower; got {self.direction!r}")
        object.__setattr__(self, "nodes", tuple(self.nodes))
        seen: set[str] = set()
        for node in self.nodes:
            if not isinstance(node, Node):
                raise RecordError(f"a journal holds Nodes; got {type(node).__name__}")
            if node.id in seen:
                raise RecordError(f"journal of {self.task_id}: node id {node.id} appears twice")
            if node.parent_id is not None and node.parent_id not in seen:
                raise RecordError(
                    f"journal of {self.task_id}: node {node.id} names parent {node.parent_id}, "
                    "which is not an earlier node"
                )
            seen.add(node.id)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {node.id: i for i, node in enumerate(self.nodes)}

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._index

    @property
    def is_lower_better(self) -> bool:
        return self.direction == "lower"

    def add(self, node: Node) -> Journal:
        """A new journal with `node` appended (validated like any journal)."""
        return Journal(self.task_id, self.direction, (*self.nodes, node))

    def get(self, node_id: str) -> Node:
        try:
            return self.nodes[self._index[node_id]]
        except KeyError:
            raise RecordError(f"no node {node_id!r} in the journal of {self.task_id}") from None

    def position(self, node_id: str) -> int:
        """The 0-based position of a node in the journal."""
        self.get(node_id)
        return self._index[node_id]

    def children(self, node_id: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.parent_id == node_id)

    @property
    def draft_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.parent_id is None)

    @property
    def buggy_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.is_buggy)

    @property
    def good_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.valid)

    @property
    def leaves(self) -> tuple[Node, ...]:
        parents = {n.parent_id for n in self.nodes}
        return tuple(n for n in self.nodes if n.id not in parents)

    def best_node(self) -> Node | None:
        """The valid node with the best (public) score for the direction; the earliest among
        ties. In a run without scores (feedback "none") the search picks by what it can
        see: the last valid node."""
        scored = [n for n in self.good_nodes if n.score is not None]
        if not scored:
            return self.good_nodes[-1] if self.good_nodes else None
        best: Node | None = None
        for node in scored:
            if best is None or (
                node.score < best.score if self.is_lower_better else node.score > best.score  # type: ignore[operator]
            ):
                best = node
        return best

    @property
    def best_score(self) -> float | None:
        best = self.best_node()
        return None if best is None else best.score

    def debug_depth(self, node_id: str) -> int:
        """How many debug steps in a row led to this node (0 for drafts and improvements)."""
        depth = 0
        node = self.get(node_id)
        while node.stage == "debug":
            depth += 1
            node = self.get(node.parent_id)  # type: ignore[arg-type]
        return depth

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": JOURNAL_FORMAT,
            "version": JOURNAL_VERSION,
            "task_id": self.task_id,
            "direction": self.direction,
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Journal:
        what = "journal"
        if read_field(data, "format", (str,), what) != JOURNAL_FORMAT:
            raise RecordError(f"not a journal: format is {data['format']!r}, expected {JOURNAL_FORMAT!r}")
        version = read_field(data, "version", (int,), what)
        if version != JOURNAL_VERSION:
            raise RecordError(
                f"journal format version {version} is not supported (this mleforge reads {JOURNAL_VERSION})"
            )
        nodes = read_field(data, "nodes", (list,), what)
        return cls(
            task_id=read_field(data, "task_id", (str,), what),
            direction=read_field(data, "direction", (str,), what),
            nodes=tuple(Node.from_dict(n) for n in nodes),
        )

    def save(self, path: str | Path) -> Path:
        """Write the journal as JSON atomically: a reader (or a crash) never sees half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, indent=1)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o644)  # mkstemp makes 0600; a journal is a shareable result
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path) -> Journal:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RecordError(f"cannot read journal {path}: {exc}") from exc
        return cls.from_dict(data)

    def content(self) -> list[dict[str, Any]]:
        """The journal's content as a prompt can show it, independent of the run that
        made it: node ids become positions, and ids, steps, timestamps, wall times and
        metadata are left out (they differ between two runs that did the same thing)."""
        out = []
        for node in self.nodes:
            out.append({
                "stage": node.stage,
                "parent": None if node.parent_id is None else self._index[node.parent_id],
                "plan": node.plan,
                "code": node.code,
                "execution": None if node.execution is None else node.execution.content(),
                "score": node.score,
                "valid": node.valid,
                "error": node.error,
            })
        return out
