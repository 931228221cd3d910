"""Rule reward functions: loading one, checking what it returns, and running it in a process of its own.

A user's reward function is arbitrary code. Run in the trainer's process, one that blocks hangs the run
and one that calls `os._exit` ends it without a word. `RewardProcess` runs it in a child process, kept
warm between calls and handed a whole batch of rows per call (a round trip per step, not per row), with a
deadline on each row: a row that takes longer than `timeout_s`, or a child that exits, is reported with
the row it was scoring instead of hanging or vanishing.

This module imports neither torch nor anything heavy: the child starts with it alone (~0.2 s).
"""

from __future__ import annotations

import importlib
import math
import mmap
import numbers
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from multiprocessing.connection import Connection
from typing import Any, Callable

RewardFn = Callable[..., Any]
Row = tuple[Any, str, Any, Any]  # (data_source, solution_str, ground_truth, extra_info)
# What scoring a batch gives: per row a float (a usable score) or the repr of what the function returned
# instead; then the error that stopped it, as (row, "TypeName: message", where in the function it was raised,
# the exception itself: None once it has crossed from the child), or None.
Scored = tuple[list[Any], tuple[int, str, str, BaseException | None] | None]

_SHOWN_CHARS = 200  # of a value or an argument in a message


class RewardFunctionError(Exception):
    """A reward function could not be loaded, or raised / returned something unusable for a sample."""


class RewardProcessError(RewardFunctionError):
    """The reward's process stopped scoring: a row ran past the timeout, or the process exited."""

    def __init__(self, message: str, row: int | None) -> None:
        super().__init__(message)
        self.row = row  # the row it was scoring, None if it was not scoring one (loading the function)


def load_reward_fn(spec: str) -> RewardFn:
    """Import `"package.module:function"` and return the function."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise RewardFunctionError(
            f"reward function {spec!r} must be written as 'module:function', e.g. 'rlgraph.tasks.arith:exact_match'"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise RewardFunctionError(f"reward function {spec!r}: module {module_name!r} not found ({err})") from err
    except Exception as err:
        raise RewardFunctionError(
            f"reward function {spec!r}: importing module {module_name!r} failed with {type(err).__name__}: {err}"
        ) from err
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise RewardFunctionError(f"reward function {spec!r}: module {module_name!r} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise RewardFunctionError(
            f"reward function {spec!r}: {module_name}.{attr} is a {type(fn).__name__}, not callable"
        )
    return fn


def as_score(value: Any) -> float | None:
    """`value` as a finite float, or None when it is not a usable score.

    Numbers are: int, float, bool (a `return answer == truth` is a 0/1 score, as Python itself counts it),
    numpy scalars and 0-d arrays or tensors. A string is not, even "1.0": a function that returns text
    has a bug that a silent float() would hide. NaN and inf are not usable either.
    """
    if type(value) is float:  # the common case, without the checks below
        return value if math.isfinite(value) else None
    if getattr(value, "shape", None) == () and hasattr(value, "item"):  # numpy / torch 0-d
        value = value.item()
    if not isinstance(value, numbers.Number) and type(value).__module__ != "numpy":  # np.bool_ is no Number
        return None
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):  # a complex, an int past float's range
        return None
    return number if math.isfinite(number) else None


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def score_rows(fn: RewardFn, rows: list[Row], on_row: Callable[[int], None] | None = None) -> Scored:
    """Call `fn` on each row until one raises."""
    values: list[Any] = []
    for i, args in enumerate(rows):
        if on_row is not None:
            on_row(i)
        try:
            value = fn(*args)
        except Exception as err:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            return values, (i, f"{type(err).__name__}: {err}", f"{frame.filename}:{frame.lineno}", err)
        number = as_score(value)
        values.append(shown(value) if number is None else number)
    return values, None


# --- the child process -------------------------------------------------------------------------------

_NOT_SCORING = -1  # the row slot while the child waits for work
_LOADING = -2  # ... while it imports the function
_SLOT = struct.Struct("<qd")  # (row being scored, time.monotonic() when it started), shared with the parent
_LOAD_TIMEOUT_S = 60.0  # importing a reward module may take a while (sympy, ...), whatever timeout_s is
_CHILD_CODE = "import sys; from rlgraph.workers.reward_process import serve; serve(int(sys.argv[1]), int(sys.argv[2]))"


def serve(conn_fd: int, slot_fd: int) -> None:
    """The child's main loop: load the function, then score batches until the parent goes away."""
    conn = Connection(conn_fd)
    slot = mmap.mmap(slot_fd, _SLOT.size)
    parent = os.getppid()

    def orphaned() -> None:  # the parent died (killed) while this child was busy in the function
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    path, fn_ref = conn.recv()
    sys.path[:] = path  # the parent's: a reward module next to the spec, or put there by a test
    _SLOT.pack_into(slot, 0, _LOADING, time.monotonic())
    try:
        fn = load_reward_fn(fn_ref) if isinstance(fn_ref, str) else pickle.loads(fn_ref)
    except Exception as err:
        conn.send(("error", str(err)))
        return
    _SLOT.pack_into(slot, 0, _NOT_SCORING, 0.0)
    conn.send(("ready", None))
    while True:
        try:
            rows = conn.recv()
        except (EOFError, OSError):
            return
        values, error = score_rows(fn, rows, lambda row: _SLOT.pack_into(slot, 0, row, time.monotonic()))
        _SLOT.pack_into(slot, 0, _NOT_SCORING, 0.0)
        conn.send((values, error and error[:3] + (None,)))  # the exception may not unpickle in the parent


class RewardProcess:
    """A warm child process that runs one reward function, a batch of rows per call.

    The child writes the row it is scoring and when it started into a small shared page; the parent waits
    for the batch's answer and looks at that page every `tick`, so a row past its deadline is found
    within a fraction of a second without a message per row.
    """

    def __init__(self, fn: str | RewardFn, name: str, timeout_s: float) -> None:
        self.fn, self.name, self.timeout_s = fn, name, timeout_s
        self.tick = min(0.25, timeout_s / 2)
        self.proc: subprocess.Popen | None = None

    def score(self, rows: list[Row]) -> Scored:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.conn.send(rows)
        return self._wait()

    def close(self, kill: bool = False) -> None:
        if self.proc is not None:
            if kill:  # busy in the function: no point waiting for it to read the end of the connection
                self.proc.kill()
            self._finalizer()
            self.proc = None

    # --- internals

    def _start(self) -> None:
        fn_ref = self.fn if isinstance(self.fn, str) else _pickled(self.fn, self.name)
        parent_end, child_end = _socketpair()
        slot_file = tempfile.TemporaryFile()
        slot_file.truncate(_SLOT.size)
        self.slot = mmap.mmap(slot_file.fileno(), _SLOT.size)
        _SLOT.pack_into(self.slot, 0, _LOADING, time.monotonic())
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD_CODE, str(child_end.fileno()), str(slot_file.fileno())],
            pass_fds=(child_end.fileno(), slot_file.fileno()), stdin=subprocess.DEVNULL,
        )
        child_end.close()
        slot_file.close()  # the mapping stays valid
        self.conn = Connection(parent_end.detach())
        self._finalizer = weakref.finalize(self, _stop, self.proc, self.conn)
        self.conn.send((list(sys.path), fn_ref))
        kind, message = self._wait()
        if kind == "error":
            self.close()
            raise RewardFunctionError(message)

    def _wait(self) -> Any:
        while True:
            if self.conn.poll(self.tick):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    self._died()
            row, started = _SLOT.unpack_from(self.slot, 0)
            limit = max(self.timeout_s, _LOAD_TIMEOUT_S) if row == _LOADING else self.timeout_s
            if row != _NOT_SCORING and time.monotonic() - started > limit:
                self.close(kill=True)
                if row == _LOADING:
                    raise RewardProcessError(f"loading reward function {self.name} took longer than {limit:g} s", None)
                raise RewardProcessError(
                    f"reward function {self.name} took longer than timeout_s = {self.timeout_s:g} s on row {row} and "
                    "was stopped (raise `timeout_s` in the reward's block if it is only slow)", row)
            if self.proc.poll() is not None:
                self._died()

    def _died(self) -> None:
        row, _ = _SLOT.unpack_from(self.slot, 0)
        try:
            code = self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # closed its end of the connection but lives on
            self.proc.kill()
            code = self.proc.wait()
        self.close()
        if code < 0:
            try:
                how = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
            if code == -signal.SIGKILL:
                how += " (out of memory?)"
        else:
            how = f"exited with code {code}"
        what = f"the process of reward function {self.name} {how}"
        if row == _LOADING:
            raise RewardProcessError(f"{what} while loading it", None)
        if row == _NOT_SCORING:
            raise RewardProcessError(f"{what} between rows", None)
        raise RewardProcessError(f"{what} while scoring row {row}: the function ended its process (os._exit, a crash "
                                 "in native code)", row)


def _socketpair():
    import socket

    return socket.socketpair()


def _pickled(fn: RewardFn, name: str) -> bytes:
    try:
        return pickle.dumps(fn)
    except Exception as err:
        raise RewardFunctionError(f"{name} cannot be sent to a process of its own ({type(err).__name__}: {err}); "
                                  "define it at the top level of a module") from None


def _stop(proc: subprocess.Popen, conn: Connection) -> None:
    conn.close()  # an idle child reads EOF and exits
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:  # busy in the function
        proc.kill()
        proc.wait()
