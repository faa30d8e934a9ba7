"""AIDE-style search: which state to work on next, given the journal so far."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mleforge.agent.journal import Journal
from mleforge.agent.state import State
from mleforge.errors import ConfigError


@dataclass(frozen=True)
class SearchConfig:
    """Draft `num_drafts` solutions first; then debug a buggy leaf with probability
    `debug_prob` (up to `max_debug_depth` debug steps in a row), else improve the best."""

    num_drafts: int = 2
    debug_prob: float = 0.5
    max_debug_depth: int = 3

    def __post_init__(self) -> None:
        if self.num_drafts < 1:
            raise ConfigError(f"num_drafts must be >= 1; got {self.num_drafts}")
        if not 0.0 <= self.debug_prob <= 1.0:
            raise ConfigError(f"debug_prob must be in [0, 1]; got {self.debug_prob}")
        if self.max_debug_depth < 0:
            raise ConfigError(f"max_debug_depth must be >= 0; got {self.max_debug_depth}")


def next_state(
    journal: Journal,
    config: SearchConfig,
    rng: np.random.Generator,
    ideas: tuple[str, ...] = (),
) -> State:
    """The state of the next step. `ideas` go into the first draft's prompt only."""
    if len(journal.draft_nodes) < config.num_drafts:
        return State.draft(journal.task_id, ideas if len(journal) == 0 else (), journal, journal.direction)
    debuggable = [
        n for n in journal.buggy_nodes
        if n.execution is not None and not journal.children(n.id)
        and journal.debug_depth(n.id) < config.max_debug_depth
    ]
    best = journal.best_node()
    if debuggable and (best is None or rng.random() < config.debug_prob):
        return State.debug(journal, debuggable[int(rng.integers(len(debuggable)))].id)
    if best is not None:
        return State.improve(journal, best.id)
    return State.draft(journal.task_id, (), journal, journal.direction)
