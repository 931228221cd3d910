"""One run per directory: `rlgraph run` holds an exclusive lock on DIR/run.lock while it runs.

    with RunDirLock(run_dir):   # before anything is written into DIR, before Ray starts
        ...

The lock is `flock` on an open file: the kernel drops it when the process ends, however it ends
(kill -9 included), so a stale lock cannot outlive its run. The holder writes who it is into the file
(pid, host, start time, command) so that a second run can name it. The file itself stays: deleting a
locked file would let a third run lock a new file of the same name while the second waits on the old one.

Imports nothing heavy: the check runs before torch and Ray load, so a refused run exits at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from rlgraph.runtime.disk import writing
from rlgraph.runtime.errors import RunError

LOCK_FILE = "run.lock"


class RunDirLocked(RunError):
    """Another process is running into the same run directory."""


class RunDirLock:
    """DIR/run.lock, held from `acquire()` (again: a no-op) to `release()` or the end of the process."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, creating DIR; raise RunDirLocked naming the holder if another process has it."""
        if self.fd is not None:
            return
        try:
            with writing(self.path):  # a full disk: a RunError naming the file and the free space
                self.run_dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise RunError(f"cannot use {self.run_dir} as a run directory: {err.strerror} ({err.filename})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunDirLocked(_refusal(self.run_dir, self.path, holder)) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "argv": sys.argv}
        try:
            with writing(self.path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
        except RunError:
            os.close(fd)  # releases the lock: nothing of this run started
            raise
        self.fd = fd

    def release(self) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)  # an unlocked file names no one
        os.close(self.fd)  # releases the lock
        self.fd = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(fd: int) -> dict:
    """What the holder wrote; it writes just after it locks, so give it a moment to do so."""
    for _ in range(10):
        raw = os.pread(fd, 4096, 0)
        if raw.strip():
            try:
                return json.loads(raw)
            except ValueError:  # caught half-written
                pass
        time.sleep(0.05)
    return {}


def _refusal(run_dir: Path, path: Path, holder: dict) -> str:
    if holder:
        who = (f"process {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
               f" (`{' '.join(holder.get('argv') or [])}`)")
    else:
        who = "another process (it has not written who it is)"
    return (f"{run_dir} is in use by another run: {who} holds {path}. Two runs into one directory would "
            "overwrite each other's metrics and checkpoints, so this one did not start. Wait for that run to end "
            "(then this command resumes from the directory's latest checkpoint), or give this one another --output.")
