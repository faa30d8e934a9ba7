"""Seed states: what the buffer starts from, and never evicts.

Each task's empty-journal draft state, and every state along stored expert
trajectories (ML-Agent's step-wise RL samples states from the expert's state
distribution). `set_up_tasks` registers the tasks, offers their seeds and
seals the set-up step in one transaction, so training step 0 can read its
snapshot and a process killed during set-up leaves nothing half done. Seeds
offered later (`seed_task`, `seed_from_journal`) join as of the next unsealed
step.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from mleforge.agent.journal import Journal
from mleforge.agent.state import State
from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.records import TaskReference


def journal_states(journal: Journal) -> list[State]:
    """The state before every node of `journal`: the state whose action produced it.

    A node without a parent was drafted from the journal prefix before it; a
    node with one was a debug (buggy parent) or improve (valid parent) step on
    that parent, seen with the same prefix. Nodes whose parent never ran give
    no state (there was nothing to debug).
    """
    out: list[State] = []
    for i, node in enumerate(journal.nodes):
        prefix = Journal(journal.task_id, journal.direction, journal.nodes[:i])
        if node.parent_id is None:
            out.append(State.draft(journal.task_id, journal=prefix))
            continue
        parent = prefix.get(node.parent_id)
        if parent.execution is None:
            continue
        out.append(State.improve(prefix, parent.id) if parent.valid else State.debug(prefix, parent.id))
    return out


def seed_from_journal(buffer: StateBuffer, journal: Journal) -> list[bool]:
    """Offer the state before every node of an expert journal as a seed; one flag per
    state, True when it was new."""
    return buffer.offer(journal_states(journal), seed=True)


def seed_task(buffer: StateBuffer, task_id: str, direction: str, ideas: Sequence[str] = ()) -> bool:
    """Offer a task's empty-journal draft state as a seed; True when it was new."""
    return buffer.offer([State.draft(task_id, ideas=tuple(ideas), direction=direction)], seed=True)[0]


def task_reference(task: Any) -> TaskReference:
    """A task's headroom references: top = the leaderboard's best score, baseline = the
    sample submission's score (the grader's normalization anchor), else the
    leaderboard's worst. Needs the task prepared for the baseline."""
    from mleforge.grading.grader import sample_submission_score

    scores = task.leaderboard()["score"].astype(float)
    lower = task.is_lower_better
    top = float(scores.min() if lower else scores.max())
    baseline = sample_submission_score(task, "public")  # the part training rewards are on
    if baseline is None:
        baseline = float(scores.max() if lower else scores.min())
    return TaskReference(task.id, "lower" if lower else "higher", top, float(baseline))


def set_up_tasks(
    buffer: StateBuffer,
    tasks: Iterable[Any],
    journals: Iterable[Journal] = (),
    *,
    stages: Collection[str] | None = None,
) -> bool:
    """The buffer's set-up, in one transaction: each task's references and draft seed,
    and the state before every node of each expert journal as a seed; then the set-up
    step is sealed. False (nothing done) when the buffer was set up already, so a
    resumed run calls it again safely.

    `stages` keeps only the states of those stages (e.g. debug and improve, whose
    edit-block completions are short, where a completion cap could not hold a whole
    draft script): each task's empty-journal draft seed is kept where `stages` keeps
    drafts, and for a task that no journal gives a state of those stages (so that every
    task has a seed).
    """
    if buffer.sealed_step is not None:
        return False
    references = [task_reference(task) for task in tasks]
    kept: list[State] = []
    for journal in journals:
        kept.extend(s for s in journal_states(journal) if stages is None or s.stage in stages)
    seeded = {s.task_id for s in kept}
    drafts = [State.draft(ref.task_id, direction=ref.direction) for ref in references
              if stages is None or "draft" in stages or ref.task_id not in seeded]
    return buffer.set_up(references, drafts + kept)
