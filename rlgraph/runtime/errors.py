"""Errors a user can act on. `rlgraph run` prints their message (no traceback) and exits 1.

Every one of them says what failed, where, and what to do about it; anything else that escapes the
runtime is a bug in rlgraph and keeps its traceback.
"""

from __future__ import annotations


class RunError(Exception):
    """A run cannot start or cannot go on; the message is for the user."""

    resumable = False  # the run stopped with its checkpoints whole: `rlgraph run` adds the command that resumes it


class PreflightError(RunError):
    """Found before any worker starts: a model, a data file or a reward function that cannot be used."""


class CheckpointError(RunError):
    """A checkpoint (or metrics.jsonl) cannot be written or read: the message names the file and the cause."""


class PlacementError(RunError):
    """The cluster cannot host a pool: it does not fit, or its placement group did not come up in time."""


class WorkerError(RunError):
    """An exception inside a worker, with where it happened and the worker's own traceback.

    Raised in the worker process (DeviceProcess) and carried to the driver by Ray; the args are plain
    strings and ints so it pickles as is.
    """

    def __init__(self, role: str, replica: int, node: str, process: str, action: str, error: str, traceback: str) -> None:
        super().__init__(role, replica, node, process, action, error, traceback)
        self.role, self.replica, self.node, self.process = role, replica, node, process
        self.action, self.error, self.traceback = action, error, traceback

    def __str__(self) -> str:
        where = f"role `{self.role}` (replica {self.replica}, node {self.node}, process {self.process})"
        return (
            f"{where} failed in {self.action}: {self.error}\n\n"
            f"The worker's traceback:\n{self.traceback.rstrip()}"
        )


class EnvironmentFailedError(RunError):
    """An environment of a multi-turn rollout cannot be used, or failed more samples than its block allows."""


class ProcessDiedError(RunError):
    """A worker process died (killed for memory, a crash in native code, a signal) rather than raising.

    `died` is what Ray said of it, without the guess at the cause: a run stopped by a signal that reached its
    Ray processes too names the process that ended, not memory."""

    def __init__(self, message: str, died: str = "") -> None:
        super().__init__(message)
        self.died = died or message

    def __reduce__(self) -> tuple:  # it crosses Ray from a worker process (a reward's or environment's process killed)
        return type(self), (str(self), self.died)


class FailuresSpentError(ProcessDiedError):
    """A worker process died after the run had made the recoveries train.max_failures allows: it stops, and a
    resume goes on from its last checkpoint."""

    resumable = True

