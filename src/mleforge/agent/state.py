"""What the agent sees at one step: a task, the journal so far, and what to do next.

Like every agent record it is a frozen dataclass with `to_dict`/`from_dict`, and
`from_dict(to_dict(x)) == x` exactly after a JSON round trip (fields.py says why).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from mleforge.agent.fields import RecordError, read_field
from mleforge.agent.journal import Journal
from mleforge.agent.node import Node
from mleforge.reward.components import STAGES

# Bump when the content that goes into State.state_id changes: old buffers then
# simply stop deduplicating against new states instead of colliding with them.
STATE_HASH_VERSION = 1


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
        ideas = read_field(data, "ideas", (list,), what)
        return cls(
            task_id=read_field(data, "task_id", (str,), what),
            stage=read_field(data, "stage", (str,), what),
            journal=Journal.from_dict(read_field(data, "journal", (dict,), what)),
            target_node_id=read_field(data, "target_node_id", (str,), what, optional=True),
            ideas=tuple(ideas),
        )
