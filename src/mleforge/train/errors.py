"""The training package's errors, under mleforge's one exception tree."""

from __future__ import annotations

from mleforge.errors import MleforgeError


class TrainError(MleforgeError):
    """A training run cannot start or continue (a bad setting for this machine, a run
    directory that holds another run, a checkpoint that does not load)."""
