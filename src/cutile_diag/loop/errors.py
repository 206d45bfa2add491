"""Errors of the optimisation loop (all ``CutileDiagError``: one line, exit code 2)."""
from __future__ import annotations

from ..errors import CutileDiagError


class LoopError(CutileDiagError):
    """The loop cannot start or continue (bad session, bad options)."""


class GitError(LoopError):
    """A git command failed, or the repository is not in a state the loop can work in."""


class DirtyTreeError(GitError):
    """The work tree has changes the loop did not make."""


class ForbiddenEditError(LoopError):
    """Files other than the kernel's file and its launch wrapper changed."""

    def __init__(self, files: list[str], allowed: list[str]):
        self.files, self.allowed = list(files), list(allowed)
        super().__init__(f"refusing to measure: {', '.join(files)} changed, but only the kernel's file and its "
                         f"launch wrapper may change ({', '.join(allowed)})",
                         hint="undo those edits (tests and benchmark code are never part of an optimisation)")


class BackendError(LoopError):
    """A measurement backend failed in a way that is not the candidate's fault (setup, parse)."""


class MeasurementTimeout(LoopError):
    """A verification or measurement ran past the iteration's time budget and was killed.
    ``label``: the version whose run was killed (None: the budget ran out before a run began)."""

    def __init__(self, message: str, *, label: str | None = None, **kw):
        self.label = label
        super().__init__(message, **kw)


class CandidateCrash(LoopError):
    """Running the candidate crashed (worker died, command failed without a result)."""
