"""Slow self-contained tests run in the background while the rest of the suite runs.

Most of the suite keeps one core of a 2-core machine busy (a run's driver waits while its actor works, and
unit tests are single-threaded), so a test whose work is a subprocess with a Ray of its own, or none, can run
beside them on the other core. Such a module registers its work with `@job`; at collection the root
conftest queues the jobs of the selected modules (one at a time, in collection order) and moves their tests
to the end of the session, where each waits for its job's result and asserts on it as before. A test run
alone starts its job when it first asks for it. Failures inside a job are raised in the test that reads it.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

_JOBS: dict[str, Callable[[Path], Any]] = {}  # module name -> its work: workdir -> result
_results: dict[str, tuple[bool, Any]] = {}
_done: dict[str, threading.Event] = {}
_queue: queue.Queue[str | None] = queue.Queue()
_lock = threading.Lock()
_live: set[subprocess.Popen] = set()
_stopping = threading.Event()
_workdir: Path | None = None
_thread: threading.Thread | None = None


def job(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """Register `fn(workdir) -> result` as the background work of the test module that defines it."""
    _JOBS[fn.__module__] = fn
    return fn


def has_job(module: str) -> bool:
    return module in _JOBS


def start(modules: list[str]) -> None:
    """Queue the jobs of these modules, in this order, on one background thread."""
    global _thread
    for module in modules:
        with _lock:
            if module in _done:
                continue
            _done[module] = threading.Event()
        _queue.put(module)
    with _lock:
        if _thread is None and modules:
            _thread = threading.Thread(target=_worker, name="background-tests", daemon=True)
            _thread.start()


def result(module: str) -> Any:
    """The result of `module`'s job, waiting for it (or running it here if it was never queued)."""
    with _lock:
        event = _done.get(module)
        queued = event is not None
        if not queued:
            event = _done[module] = threading.Event()
    if not queued:
        _run(module)
    event.wait()
    ok, value = _results[module]
    if not ok:
        raise value
    return value


def popen(args: list[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen in its own process group, stopped with the session if it is still running then."""
    process = subprocess.Popen(args, start_new_session=True, **kwargs)
    with _lock:
        _live.add(process)
    return process


def run(args: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run(capture_output=True, text=True) through `popen`."""
    process = popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(process)
        out, err = process.communicate()
        raise AssertionError(f"{args} ran past {timeout} s:\n{out[-3000:]}\n{err[-3000:]}") from None
    finally:
        with _lock:
            _live.discard(process)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def started_by_a_job(pid: int) -> bool:
    """Whether `pid` is one of the jobs' processes or below one: a test that looks for this session's
    processes (its Ray workers, to kill one) must leave those alone."""
    with _lock:
        roots = {p.pid for p in _live if p.poll() is None}
    while pid > 1 and roots:
        if pid in roots:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def stop() -> None:
    """End of the session: stop what still runs (an interrupted or -x session) and delete the work folder."""
    _stopping.set()
    _queue.put(None)
    with _lock:
        live = list(_live)
    for process in live:
        _stop(process)
    if _workdir is not None:
        shutil.rmtree(_workdir, ignore_errors=True)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM first (bench/chaos.py stops the runs it started), then SIGKILL to the group."""
    if process.poll() is not None:  # ended and reaped: its pid may be another's now
        return
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _worker() -> None:
    while (module := _queue.get()) is not None and not _stopping.is_set():
        _run(module)


def _run(module: str) -> None:
    global _workdir
    with _lock:
        if _workdir is None:
            _workdir = Path(tempfile.mkdtemp(prefix="rlgraph-tests-bg-"))
    folder = _workdir / module.rsplit(".", 1)[-1]
    folder.mkdir()
    try:
        _results[module] = (True, _JOBS[module](folder))
    except BaseException as error:  # noqa: BLE001 (raised again in the test that reads it)
        _results[module] = (False, error)
    finally:
        _done[module].set()
