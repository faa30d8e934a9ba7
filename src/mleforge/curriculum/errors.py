"""The curriculum's errors, under mleforge's one exception tree."""

from __future__ import annotations

from mleforge.errors import MleforgeError


class CurriculumError(MleforgeError):
    """A curriculum record or call is inconsistent (a bad rollout, a step's inputs that do not line up)."""


class StateBufferError(CurriculumError):
    """The state buffer cannot do what was asked (unreadable file, unknown state, refused write)."""


class SchemaVersionError(StateBufferError):
    """The buffer file was written by a different schema version of mleforge."""


class StepNotSealed(StateBufferError):
    """A snapshot was asked of a step whose feedback is not committed yet."""


class StepSealed(StateBufferError):
    """A write names a step that is already sealed: it would change a snapshot ranks may have read."""
