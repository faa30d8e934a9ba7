"""The agent's records: what a run showed, one attempt, the tree of attempts, one step's state.

Every record is a frozen dataclass with `to_dict`/`from_dict`, and
`from_dict(to_dict(x)) == x` exactly after a JSON round trip: these records
cross every boundary (the state buffer in SQLite, journals on disk, verl
parquet), so they hold only JSON values (str, int, float, bool, None, lists,
dicts with str keys).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mleforge.errors import MleforgeError
from mleforge.reward.components import STAGES, classify_outcome

DIRECTIONS = ("higher", "lower")
JOURNAL_FORMAT = "mleforge-journal"
JOURNAL_VERSION = 1
# Bump when the content that goes into State.state_id changes: old buffers then
# simply stop deduplicating against new states instead of colliding with them.
STATE_HASH_VERSION = 1


class RecordError(MleforgeError):
    """A node, journal or state is inconsistent, or its serialized form is malformed."""


def trim_head_tail(text: str, head: int, tail: int) -> str:
    """`text` if it fits in head + tail characters, else its first `head` and last
    `tail` characters around a line saying how much was left out. Errors tend to
    be at the end of an output and set-up information at its start."""
    if head < 0 or tail < 0:
        raise ValueError("head and tail must be >= 0")
    if len(text) <= head + tail:
        return text
    omitted = len(text) - head - tail
    end = text[len(text) - tail:] if tail else ""
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{end}"


# --- small readers for from_dict: a malformed record names the key at fault ---


def _get(data: Mapping[str, Any], key: str, kinds: tuple[type, ...], what: str, optional: bool = False) -> Any:
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


def _number(data: Mapping[str, Any], key: str, what: str, optional: bool = False) -> float | None:
    value = _get(data, key, (int, float), what, optional)
    return None if value is None else float(value)


@dataclass(frozen=True)
class ExecutionSummary:
    """What the agent is shown of one run of its script.

    The sandbox's ExecutionResult maps onto it field by field (see
    `from_result`); stdout and stderr are already capped head+tail there.
    """

    returncode: int | None  # None when the process never exited by itself (killed)
    timed_out: bool
    killed_by: str | None  # e.g. "timeout", "memory": which limit ended the run
    wall_s: float
    stdout: str
    stderr: str
    submission_written: bool  # the script left ./submission/submission.csv

    @property
    def succeeded(self) -> bool:
        """The process exited 0 by itself (the submission may still be invalid)."""
        return self.returncode == 0 and not self.timed_out and self.killed_by is None

    @classmethod
    def from_result(cls, result: Any, max_chars: int | None = None) -> ExecutionSummary:
        """Convert anything with the sandbox's ExecutionResult attributes
        (returncode, timed_out, killed_by, wall_s, stdout, stderr, submission_path),
        trimming each output to `max_chars` (half head, half tail) when given."""

        def text(value: Any) -> str:
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")
            if max_chars is not None:
                value = trim_head_tail(value, max_chars // 2, max_chars - max_chars // 2)
            return value

        return cls(
            returncode=None if result.returncode is None else int(result.returncode),
            timed_out=bool(result.timed_out),
            killed_by=getattr(result, "killed_by", None),
            wall_s=float(result.wall_s),
            stdout=text(result.stdout),
            stderr=text(result.stderr),
            submission_written=getattr(result, "submission_path", None) is not None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "returncode": self.returncode,
            "timed_out": self.timed_out,
            "killed_by": self.killed_by,
            "wall_s": self.wall_s,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "submission_written": self.submission_written,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionSummary:
        what = "execution"
        return cls(
            returncode=_get(data, "returncode", (int,), what, optional=True),
            timed_out=_get(data, "timed_out", (bool,), what),
            killed_by=_get(data, "killed_by", (str,), what, optional=True),
            wall_s=_number(data, "wall_s", what),  # type: ignore[arg-type]
            stdout=_get(data, "stdout", (str,), what),
            stderr=_get(data, "stderr", (str,), what),
            submission_written=_get(data, "submission_written", (bool,), what),
        )

    def content(self) -> dict[str, Any]:
        """What a prompt may show of the run: everything but the wall time, which
        differs between two runs of the same script."""
        data = self.to_dict()
        del data["wall_s"]
        return data


@dataclass(frozen=True)
class Node:
    """One attempt: a plan and a script, what running it showed, and its grade.

    `valid` means the run produced a valid, graded submission (`score` is its
    test score); a node that is not valid is buggy and can be debugged.
    `error` says why a node is not valid (the crash, the timeout, the grader's
    reason for rejecting the submission). `execution` is None when nothing ran
    (the completion had no parsable action).
    """

    id: str
    stage: str  # the stage that produced it: draft, debug or improve
    plan: str
    code: str
    parent_id: str | None = None
    step: int = 0
    execution: ExecutionSummary | None = None
    score: float | None = None
    valid: bool = False
    error: str | None = None
    created_at: float = 0.0  # seconds since the epoch, from the caller's clock
    metadata: dict[str, Any] = field(default_factory=dict)  # policy name, tokens...; JSON values only

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise RecordError(f"a node's id must be a non-empty string; got {self.id!r}")
        if self.stage not in STAGES:
            raise RecordError(f"node {self.id}: stage must be one of {', '.join(STAGES)}; got {self.stage!r}")
        if (self.stage == "draft") != (self.parent_id is None):
            raise RecordError(
                f"node {self.id}: a draft has no parent and a {self.stage} node needs one "
                f"(stage {self.stage!r}, parent {self.parent_id!r})"
            )
        if self.valid and (self.score is None or not math.isfinite(self.score)):
            raise RecordError(f"node {self.id}: a valid node needs a finite score; got {self.score!r}")
        # A copy, so the caller's dict can change without changing this frozen record.
        object.__setattr__(self, "metadata", dict(self.metadata))

    def __hash__(self) -> int:  # metadata is a dict: hash by id (equal nodes share an id)
        return hash(self.id)

    @property
    def is_buggy(self) -> bool:
        """No valid submission came out of this node."""
        return not self.valid

    @property
    def outcome(self) -> str:
        """The reward case of this node (mleforge.reward.classify_outcome)."""
        ex = self.execution
        if ex is None:
            return "valid" if self.valid else "format_error"
        return classify_outcome(
            format_ok=True,
            timed_out=ex.timed_out,
            returncode=ex.returncode,
            killed_by=ex.killed_by,
            valid_submission=self.valid,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "stage": self.stage,
            "step": self.step,
            "plan": self.plan,
            "code": self.code,
            "execution": None if self.execution is None else self.execution.to_dict(),
            "score": self.score,
            "valid": self.valid,
            "is_buggy": self.is_buggy,  # derived; written for readers, ignored by from_dict
            "error": self.error,
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Node:
        what = f"node {data.get('id', '?') if isinstance(data, Mapping) else '?'}"
        execution = _get(data, "execution", (dict,), what, optional=True)
        return cls(
            id=_get(data, "id", (str,), what),
            parent_id=_get(data, "parent_id", (str,), what, optional=True),
            stage=_get(data, "stage", (str,), what),
            step=_get(data, "step", (int,), what),
            plan=_get(data, "plan", (str,), what),
            code=_get(data, "code", (str,), what),
            execution=None if execution is None else ExecutionSummary.from_dict(execution),
            score=_number(data, "score", what, optional=True),
            valid=_get(data, "valid", (bool,), what),
            error=_get(data, "error", (str,), what, optional=True),
            created_at=_number(data, "created_at", what),  # type: ignore[arg-type]
            metadata=dict(_get(data, "metadata", (dict,), what)),
        )


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
        """The valid node with the best score for the direction; the earliest among ties."""
        best: Node | None = None
        for node in self.good_nodes:
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
        if _get(data, "format", (str,), what) != JOURNAL_FORMAT:
            raise RecordError(f"not a journal: format is {data['format']!r}, expected {JOURNAL_FORMAT!r}")
        version = _get(data, "version", (int,), what)
        if version != JOURNAL_VERSION:
            raise RecordError(
                f"journal format version {version} is not supported (this mleforge reads {JOURNAL_VERSION})"
            )
        nodes = _get(data, "nodes", (list,), what)
        return cls(
            task_id=_get(data, "task_id", (str,), what),
            direction=_get(data, "direction", (str,), what),
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


@dataclass(frozen=True)
class State:
    """What the agent sees at one step: a task, the journal so far, and what to do next.

    draft: write a new solution (`target_node_id` is None); debug: fix the buggy
    target; improve: improve the valid target. `ideas` are exploration hints
    injected into a first prompt (ML-Agent's exploration enrichment).

    `state_id` is the sha256 of a canonical JSON (sorted keys, no spaces, UTF-8) of

        {"v": STATE_HASH_VERSION, "task_id", "stage", "ideas",
         "target": the target's 0-based position in the journal (or None),
         "journal": Journal.content()}

    i.e. of everything the prompt is rendered from, and nothing that differs
    between two runs doing the same thing: node ids, steps, timestamps, wall
    times and metadata are left out, and so is the journal's direction (a
    function of the task). Two identical states from different runs share an id,
    so the evolving buffer deduplicates them.
    """

    task_id: str
    stage: str
    journal: Journal
    target_node_id: str | None = None
    ideas: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "ideas", tuple(self.ideas))
        if not all(isinstance(i, str) for i in self.ideas):
            raise RecordError("a state's ideas must be strings")
        if self.stage not in STAGES:
            raise RecordError(f"state stage must be one of {', '.join(STAGES)}; got {self.stage!r}")
        if self.journal.task_id != self.task_id:
            raise RecordError(f"state of task {self.task_id} holds a journal of task {self.journal.task_id}")
        if self.stage == "draft":
            if self.target_node_id is not None:
                raise RecordError("a draft state has no target node")
            return
        if self.target_node_id is None:
            raise RecordError(f"a {self.stage} state needs a target node")
        target = self.journal.get(self.target_node_id)
        if target.execution is None:
            raise RecordError(
                f"node {target.id} never ran (its completion had no parsable action); "
                f"there is nothing to {self.stage}"
            )
        if self.stage == "debug" and target.valid:
            raise RecordError(f"node {target.id} is valid; debug a buggy node or improve this one")
        if self.stage == "improve" and not target.valid:
            raise RecordError(f"node {target.id} is buggy; improve a valid node or debug this one")

    def __hash__(self) -> int:  # equal states have equal content, hence equal ids
        return hash(self.state_id)

    # --- constructors ---

    @classmethod
    def draft(
        cls,
        task_id: str,
        ideas: tuple[str, ...] | list[str] = (),
        journal: Journal | None = None,
        direction: str = "higher",
    ) -> State:
        """A draft state. With no journal, an empty one; its `direction` ranks nothing
        (there are no nodes) and is not hashed, but pass the task's direction if
        the journal will be grown from this state."""
        if journal is None:  # not `journal or ...`: an empty journal is falsy, and keeps its direction
            journal = Journal(task_id, direction)
        return cls(task_id, "draft", journal, None, tuple(ideas))

    @classmethod
    def debug(cls, journal: Journal, node_id: str) -> State:
        return cls(journal.task_id, "debug", journal, node_id)

    @classmethod
    def improve(cls, journal: Journal, node_id: str) -> State:
        return cls(journal.task_id, "improve", journal, node_id)

    @classmethod
    def after(cls, journal: Journal, node: Node) -> State | None:
        """The state a rollout leads to, for the evolving buffer: `journal` already
        holds `node`; a buggy node gives its debug state, a valid one its improve
        state. None when the node never ran (a format error has no code to work on)."""
        if journal.get(node.id) != node:
            raise RecordError(f"node {node.id} differs from the journal's node of that id")
        if node.execution is None:
            return None
        return cls.improve(journal, node.id) if node.valid else cls.debug(journal, node.id)

    # --- views ---

    @property
    def target(self) -> Node | None:
        return None if self.target_node_id is None else self.journal.get(self.target_node_id)

    @property
    def step(self) -> int:
        """The index of the step this state asks for: the number of attempts so far."""
        return len(self.journal)

    def hash_content(self) -> dict[str, Any]:
        """What `state_id` hashes (see the class docstring)."""
        return {
            "v": STATE_HASH_VERSION,
            "task_id": self.task_id,
            "stage": self.stage,
            "ideas": list(self.ideas),
            "target": None if self.target_node_id is None else self.journal.position(self.target_node_id),
            "journal": self.journal.content(),
        }

    @cached_property
    def state_id(self) -> str:
        canonical = json.dumps(
            self.hash_content(), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "state_id": self.state_id,  # derived; written for readers, recomputed by from_dict
            "task_id": self.task_id,
            "stage": self.stage,
            "target_node_id": self.target_node_id,
            "ideas": list(self.ideas),
            "journal": self.journal.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> State:
        what = "state"
        ideas = _get(data, "ideas", (list,), what)
        return cls(
            task_id=_get(data, "task_id", (str,), what),
            stage=_get(data, "stage", (str,), what),
            journal=Journal.from_dict(_get(data, "journal", (dict,), what)),
            target_node_id=_get(data, "target_node_id", (str,), what, optional=True),
            ideas=tuple(ideas),
        )
