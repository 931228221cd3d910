"""Rule reward functions: loading one, checking what it returns, and running it in a process of its own.

A user's reward function is arbitrary code. Run in the trainer's process, one that blocks hangs the run
and one that calls `os._exit` ends it without a word. `RewardProcess` runs it in a child process, kept
warm between calls and handed a whole batch of rows per call (a round trip per step, not per row), with a
deadline on each row: a row that takes longer than `timeout_s`, or a child that exits, is reported with
the row it was scoring instead of hanging or vanishing. `RewardPool` runs several such processes on one
batch, so rows are scored in parallel, each still with its own deadline.

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
# the exception itself: None once it has crossed from the child), or None; then the numeric extra values of
# rows that returned a dict, by key.
Scored = tuple[list[Any], tuple[int, str, str, BaseException | None] | None, dict[str, list[float]]]

_SHOWN_CHARS = 200  # of a value or an argument in a message


class RewardFunctionError(Exception):
    """A reward function could not be loaded, or raised / returned something unusable for a sample."""


class RewardProcessError(RewardFunctionError):
    """The reward's process stopped scoring: a row ran past the timeout, or the process exited."""

    def __init__(self, message: str, row: int | None) -> None:
        super().__init__(message)
        self.row = row  # the row it was scoring, None if it was not scoring one (loading the function)


# Signals that end a child from outside (the kernel's out-of-memory killer, an operator, a scheduler stopping the
# job), not the user's code ending its own process (os._exit: an exit code; a crash in native code: SIGSEGV,
# SIGABRT), which would do so again on the same row. A wait status does not say who sent a signal, so the child's
# own code sending one of these to itself (os.kill(os.getpid(), SIGKILL), signal.raise_signal) is made an exit code
# instead (`_own_signals_as_exits`): that is the function's fault, reported on its row, not recovered from. What
# that cannot see (a shell the function starts that kills its parent, native code calling kill(2)) is treated as
# from outside: the step runs again and, if it dies the same way each time, the run stops once train.max_failures
# is spent, naming the process and the signal.
KILLED_FROM_OUTSIDE = (signal.SIGKILL, signal.SIGTERM)


class ChildKilled(Exception):
    """A child process of user code (a reward's, an environment's) was killed from outside while it had work:
    nothing about the code or the row, so the run recovers as from a worker process's death (train.max_failures,
    rlgraph/runtime/run.py) instead of failing the rows or stopping. Not a RewardFunctionError: nothing that
    reports a function's error must catch it."""


def killed_from_outside(code: int) -> bool:
    return code < 0 and -code in KILLED_FROM_OUTSIDE


def load_reward_fn(spec: str, base_dir: str | None = None, kind: str = "reward function") -> RewardFn:
    """The function named by `spec`: `"package.module:function"`, or verl's file form `"path/to/file.py:function"`.

    `base_dir` is the spec file's folder: a relative file path is read from there, and a module is looked
    for there too (after sys.path), so a `reward.py` next to the spec is found without setting PYTHONPATH.
    `kind` starts each message: a user transform or loss is loaded the same way.
    """
    where, sep, attr = spec.rpartition(":")  # rpartition: a file path may hold a ':' itself
    if not sep or not where or not attr:
        raise RewardFunctionError(
            f"{kind} {spec!r} must be written as 'module:function' (e.g. 'rlgraph.tasks.arith:exact_match') "
            "or 'path/to/file.py:function'"
        )
    if where.endswith(".py") or "/" in where or os.sep in where:
        module, what = _module_from_file(spec, where, base_dir, kind), f"file {where!r}"
    else:
        module, what = _import_module(spec, where, base_dir, kind), f"module {where!r}"
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise RewardFunctionError(f"{kind} {spec!r}: {what} has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise RewardFunctionError(f"{kind} {spec!r}: {attr} in {what} is a {type(fn).__name__}, not callable")
    return fn


def _import_module(spec: str, module_name: str, base_dir: str | None, kind: str) -> Any:
    if base_dir is not None and base_dir not in sys.path:
        sys.path.append(base_dir)  # after the installed packages: a spec's folder never shadows them
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        looked = f"sys.path and the spec's folder ({base_dir})" if base_dir is not None else "sys.path"
        raise RewardFunctionError(
            f"{kind} {spec!r}: module {module_name!r} not found ({err}); it was looked for on {looked}. "
            "Put the module next to the spec, add its folder to PYTHONPATH, install its package, or name the "
            "file itself: 'path/to/file.py:function'."
        ) from err
    except Exception as err:
        raise RewardFunctionError(
            f"{kind} {spec!r}: importing module {module_name!r} failed with {type(err).__name__}: {err}"
        ) from err


def _module_from_file(spec: str, path: str, base_dir: str | None, kind: str) -> Any:
    import importlib.util

    file = os.path.abspath(os.path.join(base_dir or os.getcwd(), os.path.expanduser(path)))
    relative = "" if os.path.isabs(os.path.expanduser(path)) else f" (relative to {base_dir or os.getcwd()})"
    if not os.path.isfile(file):
        raise RewardFunctionError(f"{kind} {spec!r}: file {file} not found{relative}")
    # one module per file, named by its path: loading the same file twice gives the same function
    name = "rlgraph_reward_" + "".join(c if c.isalnum() else "_" for c in file)
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, file)
    if module_spec is None or module_spec.loader is None:
        raise RewardFunctionError(f"{kind} {spec!r}: {file} cannot be imported (is it a .py file?)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before running it: pickle and dataclasses look a module up by name
    try:
        module_spec.loader.exec_module(module)
    except BaseException as err:
        del sys.modules[name]
        if not isinstance(err, Exception):
            raise
        raise RewardFunctionError(
            f"{kind} {spec!r}: running {file} failed with {type(err).__name__}: {err}"
        ) from err
    return module


_ARGUMENTS = ("data_source", "solution_str", "ground_truth", "extra_info")


def check_signature(fn: RewardFn, name: str, batched: bool = False) -> None:
    """A RewardFunctionError unless `fn` takes the four arguments a reward is called with (positionally)."""
    arguments = tuple(f"{a}s" for a in _ARGUMENTS) if batched else _ARGUMENTS
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: the call will tell
        return
    try:
        signature.bind(*arguments)
    except TypeError as err:
        code = getattr(fn, "__code__", None)
        where = f" (in {code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        raise RewardFunctionError(
            f"reward function {name}{where} has the signature {getattr(fn, '__name__', 'fn')}{signature}, which "
            f"cannot take the arguments a reward is called with: fn({', '.join(arguments)}) ({err}). Write it as "
            f"`def fn({', '.join(arguments[:3])}, {arguments[3]}=None)` (verl's signature)."
        ) from None


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


def score_rows(fn: RewardFn, rows: list[Row], on_row: Callable[[int], None] | None = None,
               batched: bool = False) -> Scored:
    """Call `fn` on each row until one raises; a `batched` function once, on the columns as lists.

    A function may return a number, or (as in verl) a dict whose `score` is the number and whose other
    keys are extra values: the numeric ones are gathered by key (a metric each); like verl's metrics,
    the others (text, None) are left out. A batched function's error is reported on the row `BATCH`.
    """
    values: list[Any] = []
    extras: dict[str, list[float]] = {}
    if batched:
        if not rows:
            return values, None, extras
        if on_row is not None:
            on_row(BATCH)
        try:
            returned = fn(*(list(column) for column in zip(*rows)))  # data_sources, solution_strs, ...
        except Exception as err:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            return values, (BATCH, f"raised {type(err).__name__}: {err}", f"{frame.filename}:{frame.lineno}", err), extras
        returned = returned.tolist() if hasattr(returned, "tolist") else returned  # numpy, torch
        if not isinstance(returned, (list, tuple)) or len(returned) != len(rows):
            return values, (BATCH, f"returned {shown(returned)}, not a list of {len(rows)} scores (one per row)",
                            "", None), extras
        for value in returned:
            take_score(value, values, extras)
        return values, None, extras
    for i, args in enumerate(rows):
        if on_row is not None:
            on_row(i)
        try:
            value = fn(*args)
        except Exception as err:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            return values, (i, f"{type(err).__name__}: {err}", f"{frame.filename}:{frame.lineno}", err), extras
        take_score(value, values, extras)
    return values, None, extras


def take_score(value: Any, values: list[Any], extras: dict[str, list[float]]) -> None:
    """Append one returned value to `values` (its score, or its repr when it is none) and its extras, if any
    (a reward service's answers are read the same way)."""
    number = as_score(value.get("score") if isinstance(value, dict) else value)
    values.append(shown(value) if number is None else number)
    if isinstance(value, dict) and number is not None:
        for key, extra in value.items():
            extra = as_score(extra) if key != "score" and isinstance(key, str) else None
            if extra is not None:
                extras.setdefault(key, []).append(extra)


# --- the child process -------------------------------------------------------------------------------

_NOT_SCORING = -1  # the row slot while the child waits for work
_LOADING = -2  # ... while it imports the function
BATCH = -3  # ... while a batched function scores the whole batch (in a Scored error: the batch, not a row)
_SLOT = struct.Struct("<qd")  # (row being scored, time.monotonic() when it started), shared with the parent
_LOAD_TIMEOUT_S = 60.0  # importing a reward module may take a while (sympy, ...), whatever timeout_s is
_CHILD_CODE = "import sys; from rlgraph.workers.reward_process import serve; serve(int(sys.argv[1]), int(sys.argv[2]))"


def become_child() -> None:
    """What a child process of user code does first: exit when the parent dies (killed while this child was
    busy in the user's code, which would otherwise run on orphaned), and leave Ctrl-C to the parent."""
    parent = os.getppid()

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _own_signals_as_exits()


def _own_signals_as_exits() -> None:
    """The user's code sending SIGKILL (or SIGTERM it does not handle) to its own process exits with 128 + the
    signal instead, saying so on stderr: its parent then sees an exit code, the function's doing, and not a kill
    from outside (KILLED_FROM_OUTSIDE)."""
    kill, raise_signal = os.kill, signal.raise_signal

    def ends_itself(sig: int) -> bool:
        return sig == signal.SIGKILL or (sig == signal.SIGTERM and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)

    def exit_instead(sig: int) -> None:
        sys.stderr.write(f"rlgraph: the user's code sent {signal.Signals(sig).name} to its own process\n")
        sys.stderr.flush()
        os._exit(128 + sig)

    def own_kill(pid: int, sig: int) -> None:
        if pid in (0, os.getpid()) and ends_itself(sig):
            exit_instead(sig)
        kill(pid, sig)

    def own_raise_signal(sig: int) -> None:
        if ends_itself(sig):
            exit_instead(sig)
        raise_signal(sig)

    os.kill, signal.raise_signal = own_kill, own_raise_signal


def serve(conn_fd: int, slot_fd: int) -> None:
    """The child's main loop: load the function, then score batches until the parent goes away."""
    conn = Connection(conn_fd)
    slot = mmap.mmap(slot_fd, _SLOT.size)
    become_child()
    path, fn_ref, base_dir, batched = conn.recv()
    sys.path[:] = path  # the parent's: a reward module next to the spec, or put there by a test
    _SLOT.pack_into(slot, 0, _LOADING, time.monotonic())
    try:
        fn = load_reward_fn(fn_ref, base_dir) if isinstance(fn_ref, str) else pickle.loads(fn_ref)
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
        values, error, extras = score_rows(fn, rows, lambda row: _SLOT.pack_into(slot, 0, row, time.monotonic()),
                                           batched)
        _SLOT.pack_into(slot, 0, _NOT_SCORING, 0.0)
        conn.send((values, error and error[:3] + (None,), extras))  # the exception may not unpickle in the parent


class RewardProcess:
    """A warm child process that runs one reward function, a batch of rows per call.

    The child writes the row it is scoring and when it started into a small shared page; the parent waits
    for the batch's answer and looks at that page every `tick`, so a row past its deadline is found
    within a fraction of a second without a message per row.
    """

    def __init__(self, fn: str | RewardFn, name: str, timeout_s: float, base_dir: str | None = None,
                 batched: bool = False) -> None:
        self.fn, self.name, self.timeout_s, self.base_dir, self.batched = fn, name, timeout_s, base_dir, batched
        self.tick = min(0.25, timeout_s / 2)
        self.proc: subprocess.Popen | None = None
        self.loading = False  # started, and its "ready" not read yet
        self.first, self.stride = 0, 1  # its rows' places in the whole batch (RewardPool splits batches)

    def score(self, rows: list[Row]) -> Scored:
        self.start()
        self.ready()
        self.conn.send(rows)
        return self._wait()

    def start(self) -> None:
        """Start the child if it is not running; it loads the function while the caller goes on (`ready`)."""
        if self.proc is None or self.proc.poll() is not None:
            self._launch()
            self.loading = True

    def ready(self) -> None:
        """Wait until the child has loaded the function; RewardFunctionError if it could not."""
        if self.loading:
            self.loading = False
            kind, message = self._wait()
            if kind == "error":
                self.close()
                raise RewardFunctionError(message)

    def close(self, kill: bool = False) -> None:
        if self.proc is not None:
            if kill:  # busy in the function: no point waiting for it to read the end of the connection
                self.proc.kill()
            self._finalizer()
            self.proc = None

    # --- internals

    def _launch(self) -> None:
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
        self._finalizer = weakref.finalize(self, stop_child, self.proc, self.conn)
        self.conn.send((list(sys.path), fn_ref, self.base_dir, self.batched))

    def _wait(self) -> Any:
        while True:
            if self.conn.poll(self.tick):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    self._died()
            row, started = _SLOT.unpack_from(self.slot, 0)
            batch_row = self.first + row * self.stride
            limit = max(self.timeout_s, _LOAD_TIMEOUT_S) if row == _LOADING else self.timeout_s
            if row != _NOT_SCORING and time.monotonic() - started > limit:
                self.close(kill=True)
                if row == _LOADING:
                    raise RewardProcessError(f"loading reward function {self.name} took longer than {limit:g} s", None)
                if row == BATCH:
                    raise RewardProcessError(
                        f"batched reward function {self.name} took longer than timeout_s = {self.timeout_s:g} s on "
                        "a batch and was stopped (a batched function's timeout_s is for the whole batch)", None)
                raise RewardProcessError(
                    f"reward function {self.name} took longer than timeout_s = {self.timeout_s:g} s on row {batch_row} "
                    "and was stopped (raise `timeout_s` in the reward's block if it is only slow)", batch_row)
            if self.proc.poll() is not None:
                self._died()

    def _died(self) -> None:
        row, _ = _SLOT.unpack_from(self.slot, 0)
        code = exit_code(self.proc)
        self.close()
        how = describe_exit(code) + (" (out of memory?)" if code == -signal.SIGKILL else "")
        what = f"the process of reward function {self.name} {how}"
        if killed_from_outside(code):
            doing = {_LOADING: "while loading it", _NOT_SCORING: "between rows", BATCH: "while scoring a batch"}.get(
                row, f"while scoring row {self.first + row * self.stride}")
            raise ChildKilled(f"{what} {doing}")
        if row == _LOADING:
            raise RewardProcessError(f"{what} while loading it", None)
        if row == _NOT_SCORING:
            raise RewardProcessError(f"{what} between rows", None)
        if row == BATCH:
            raise RewardProcessError(f"{what} while scoring a batch: the function ended its process (os._exit, a "
                                     "crash in native code)", None)
        row = self.first + row * self.stride
        raise RewardProcessError(f"{what} while scoring row {row}: the function ended its process (os._exit, a crash "
                                 "in native code)", row)


class RewardPool:
    """`workers` RewardProcesses scoring one batch together: row i goes to process i % workers (a group's
    rows, which come together and may be slow together, are spread out), and each row keeps its deadline.

    The processes start together and load the function at the same time; a batch of a few rows uses as
    many processes as it has rows. A batched function gets the whole batch in one process."""

    def __init__(self, fn: str | RewardFn, name: str, timeout_s: float, base_dir: str | None = None,
                 batched: bool = False, workers: int = 1) -> None:
        self.workers = 1 if batched else max(1, workers)
        self.processes = [RewardProcess(fn, name, timeout_s, base_dir, batched) for _ in range(self.workers)]

    def score(self, rows: list[Row]) -> Scored:
        if self.workers == 1:
            return self.processes[0].score(rows)
        used = self.processes[:max(1, min(self.workers, len(rows)))]
        n = len(used)
        try:
            for process in used:
                process.start()
            for process in used:
                process.ready()
            for k, process in enumerate(used):
                process.first, process.stride = k, n  # its row i is the batch's row k + i * n
                process.conn.send(rows[k::n])
            answers = []
            for process in used:
                answers.append(process._wait())
        except BaseException:
            self.close(kill=True)  # the others may still be busy, or hold an answer nobody will read
            raise
        values: list[Any] = [None] * len(rows)
        extras: dict[str, list[float]] = {}
        errors = []
        for k, (part, error, part_extras) in enumerate(answers):
            values[k::n] = part + [None] * (len(rows[k::n]) - len(part))
            for key, extra in part_extras.items():
                extras.setdefault(key, []).extend(extra)
            if error is not None:
                errors.append((k + error[0] * n,) + tuple(error[1:]))
        if errors:  # the first row in the batch's order, as one process scoring them in turn would report
            first = min(errors, key=lambda e: e[0])
            return values[:first[0]], first, extras
        return values, None, extras

    def close(self, kill: bool = False) -> None:
        for process in self.processes:
            process.close(kill=kill)


def _socketpair():
    import socket

    return socket.socketpair()


def _pickled(fn: RewardFn, name: str) -> bytes:
    try:
        return pickle.dumps(fn)
    except Exception as err:
        raise RewardFunctionError(f"{name} cannot be sent to a process of its own ({type(err).__name__}: {err}); "
                                  "define it at the top level of a module") from None


def stop_child(proc: subprocess.Popen, conn: Connection) -> None:
    """Stop a child that runs user code: close its connection, and kill it if it is busy in that code."""
    conn.close()  # an idle child reads EOF and exits
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:  # busy in the user's code
        proc.kill()
        proc.wait()


def exit_code(proc: subprocess.Popen) -> int:
    """The exit code of a child that closed its connection; one that still lives after 5 s is killed."""
    try:
        return proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def describe_exit(code: int) -> str:
    """How a child ended, as its parent's messages say it: "exited with code 3", "was killed by signal SIGKILL"."""
    if code - 128 in KILLED_FROM_OUTSIDE:  # what _own_signals_as_exits makes of a signal the code sent itself
        return f"exited with code {code} (128 + {signal.Signals(code - 128).name}: did it send that signal to its own process?)"
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"was killed by signal {signal.Signals(-code).name}"
    except ValueError:
        return f"was killed by signal {-code}"
