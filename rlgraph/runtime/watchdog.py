"""Nothing a run started outlives it: a small process that cleans up after a driver killed with `kill -9`.

A driver that ends in any other way shuts its local Ray instance down itself. Killed outright, it can do
nothing; Ray's GCS and raylet then go at once and its workers within seconds, but two Ray agents (the
dashboard and runtime-env agents) wait a hard-coded 60 s to report a GCS that is already gone. The
watchdog, started by the driver right after it starts a local Ray instance, keeps a list of the driver's
descendants (each pid with its start time, so a reused pid is never taken for one of them); when the
driver is gone it kills those still alive, and when the driver stops it (a normal end) it exits. Only a
Ray instance the run started itself is watched: one it attached to is not the run's to clean up.

    python -m rlgraph.runtime.watchdog DRIVER_PID
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5
_STARTED: set[int] = set()  # the watchdogs this process started: kill_descendants spares them


def start(driver_pid: int | None = None) -> subprocess.Popen:
    """The watchdog of this process (its own session: Ctrl-C in the terminal does not reach it)."""
    watchdog = subprocess.Popen([sys.executable, "-m", "rlgraph.runtime.watchdog", str(driver_pid or os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    _STARTED.add(watchdog.pid)
    return watchdog


def stop(watchdog: subprocess.Popen | None) -> None:
    if watchdog is not None:
        _STARTED.discard(watchdog.pid)
    if watchdog is not None and watchdog.poll() is None:
        watchdog.terminate()
        try:
            watchdog.wait(timeout=5)
        except subprocess.TimeoutExpired:
            watchdog.kill()


def _start_time(pid: int) -> str | None:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(root: int) -> dict[int, str]:
    """pid -> start time of every process below `root` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            started = _start_time(child)
            if started is not None and child != os.getpid():
                found[child] = started
                todo.append(child)
    return found


def kill_descendants(root: int | None = None) -> int:
    """SIGKILL every process below `root` (this process), sparing the watchdogs it started (they sweep what
    is no longer below it: workers of a raylet already gone); returns how many were killed. Each is stopped
    (SIGSTOP) before any is killed, until a fresh look finds no new one: a parent killed first would leave
    its children to init, out of reach, and one still running could start another meanwhile."""
    root = root or os.getpid()
    frozen: dict[int, str] = {}
    while found := {pid: started for pid, started in descendants(root).items()
                    if pid not in frozen and pid not in _STARTED}:
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        frozen.update(found)
    killed = 0
    for pid, started in frozen.items():
        if _start_time(pid) == started:  # still the process we saw, not a new one with its pid
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def watch(driver: int) -> None:
    driver_started = _start_time(driver)
    known: dict[int, str] = {}
    while _start_time(driver) == driver_started and driver_started is not None:
        known.update(descendants(driver))
        time.sleep(POLL_S)
    for pid, started in known.items():
        if _start_time(pid) == started:  # still the process we saw, not a new one with its pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    watch(int(sys.argv[1]))
