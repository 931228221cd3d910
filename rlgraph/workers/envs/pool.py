"""The process pool that hosts the episodes of a batch: `settings.workers` warm child processes.

An environment is arbitrary code: one that raises, hangs, returns something else than an Observation or
ends its process must fail its own sample only, never the rollout. Episode k of a batch lives in process
k % workers, its environment object kept there between turns. Each call of the multi-turn loop (reset,
step, end) is one request per process for all of its episodes; a process runs its episodes' calls one after
another and streams each answer back as it is ready, the processes run at once.

Deadlines, two of them:
- in the child, SIGALRM interrupts a call that runs past `timeout_s` (a sleep, a loop of Python code): that
  episode fails with kind "timeout" and the process goes on with the next call;
- in the parent, a backstop: a process that gives no answer `timeout_s` + a grace after its previous one
  (an environment that catches the alarm's exception, or blocks in native code) is killed, as is noticed a
  process that ends by itself (os._exit, a crash). Its episodes waiting for an answer fail ("timeout" for the
  call that hung, "died" for the others), those it hosted that are still running fail at their next call, and
  the next reset starts a fresh process.

A process killed from outside while it hosts episodes (SIGKILL: out of memory, an operator) is no fault of the
environment's: the pool stops and raises ChildKilled, and the run recovers as from a worker's death, its
episodes run again (train.max_failures). One killed while idle between batches is replaced at the next reset.

The child imports this package and the environment's module only (no torch): it starts in ~0.2 s.
"""

from __future__ import annotations

import numbers
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from rlgraph.workers.envs.base import Observation, Turn
from rlgraph.workers.envs.loading import EnvError, load_env_class
from rlgraph.workers.reward_process import (ChildKilled, as_score, become_child, describe_exit, exit_code,
                                            killed_from_outside, shown, stop_child)

if TYPE_CHECKING:
    from rlgraph.contract.settings import EnvSettings

GRACE_S = 3.0  # the backstop's slack over timeout_s: the alarm gets this long to stop a call
_LOAD_TIMEOUT_S = 60.0  # importing an environment's module may take a while, whatever timeout_s is
_TICK_S = 0.1  # how often the parent looks at deadlines while it waits (answers wake it at once)
_CHILD_CODE = "import sys; from rlgraph.workers.envs.pool import serve; serve(int(sys.argv[1]))"


@dataclass(frozen=True)
class EnvFailure:
    """Why an episode failed; the sample is counted as failed, gets zero reward and its tokens are masked."""

    kind: str  # raised | timeout | garbage | died
    message: str  # one line: the environment, the episode, the call and what happened
    traceback: str = ""  # the environment's formatted traceback (kind "raised"), else empty


class EnvPool:
    """`settings.workers` processes hosting the episodes of a batch (see the module's docstring)."""

    def __init__(self, settings: EnvSettings, grace_s: float = GRACE_S) -> None:
        self.settings, self.grace_s = settings, grace_s
        self.label = f"environment {settings.name} ({settings.cls})"
        self.processes = [_Process() for _ in range(max(1, settings.workers))]
        # running episodes: None, or why their process ended (they fail at their next call)
        self.episodes: dict[int, str | None] = {}

    def start(self) -> None:
        """Start every process (they import the class while the caller goes on); reset starts any not running."""
        for process in self.processes:
            self._launch(process)

    def reset(self, episodes: list[tuple[int, dict[str, Any]]]) -> dict[int, Observation | EnvFailure]:
        """Start episodes (id, data row), each in a new environment object; a reset that returns None gives
        an empty Observation. EnvError if the class cannot be loaded in a process."""
        self._collect(self.processes)  # closes still under way: a request goes to a process that waits for one
        calls: dict[int, list[tuple[str, int, Any]]] = {}
        for episode, row in episodes:
            self.episodes[episode] = None
            calls.setdefault(episode % len(self.processes), []).append(("reset", episode, row))
        used = [self.processes[k] for k in calls]
        for process in used:
            self._launch(process)
        for process in used:
            self._ready(process)
        return self._run(calls)

    def step(self, turns: list[tuple[int, Turn]]) -> dict[int, Observation | EnvFailure]:
        """Each episode's answer to the model's turn. An episode that fails is over (its object closed)."""
        results: dict[int, Observation | EnvFailure] = {}
        self._collect(self.processes)
        for process in self.processes:  # one that ended between calls (killed from outside, out of memory)
            if process.proc is not None and process.proc.poll() is not None:
                self._ended(process, results, hung=False)
        calls: dict[int, list[tuple[str, int, Any]]] = {}
        for episode, turn in turns:
            if episode not in self.episodes:
                raise ValueError(f"{self.label}: episode {episode} is not running (never reset, ended, or failed)")
            lost = self.episodes[episode]
            if lost is not None:
                del self.episodes[episode]
                results[episode] = EnvFailure(
                    "died", f"{self.label}, episode {episode}: step of turn {turn.index} not run: {lost}")
            else:
                calls.setdefault(episode % len(self.processes), []).append(("step", episode, turn))
        results.update(self._run(calls))
        return results

    def end(self, episodes: list[int]) -> None:
        """Close these episodes' objects (their errors ignored). Does not wait: the processes close them while
        the caller goes on, and the next call waits for that first."""
        calls: dict[int, list[tuple[str, int, Any]]] = {}
        for episode in episodes:
            if episode in self.episodes and self.episodes.pop(episode) is None:
                calls.setdefault(episode % len(self.processes), []).append(("end", episode, None))
        for k, items in calls.items():
            self._send(self.processes[k], items)

    def end_all(self) -> None:
        """End every episode still running and wait until their objects are closed (the end of a batch)."""
        self.end(list(self.episodes))
        self._collect(self.processes)

    def close(self, kill: bool = False) -> None:
        for process in self.processes:
            if process.proc is not None:
                if kill:  # busy in an environment: no point waiting for it to read the end of the connection
                    process.proc.kill()
                process.stop()
            process.proc, process.loading = None, False
            process.pending.clear()
        self.episodes.clear()

    # --- internals

    def _launch(self, process: _Process) -> None:
        if process.proc is not None and process.proc.poll() is None:
            return
        process.stop()  # one that ended while idle (out of memory?) is replaced before it is sent work
        parent_end, child_end = socket.socketpair()
        process.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD_CODE, str(child_end.fileno())],
            pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL,
        )
        child_end.close()
        process.conn = Connection(parent_end.detach())
        process.stop = weakref.finalize(self, stop_child, process.proc, process.conn)
        process.loading = True
        process.conn.send((list(sys.path), self.settings))

    def _ready(self, process: _Process) -> None:
        """Wait until the process has loaded the class; EnvError (all processes stopped) if it could not."""
        if not process.loading:
            return
        process.loading = False
        limit = max(_LOAD_TIMEOUT_S, self.settings.timeout_s)
        deadline = time.monotonic() + limit
        while not process.conn.poll(_TICK_S) and process.proc.poll() is None:
            if time.monotonic() > deadline:
                self.close(kill=True)
                raise EnvError(f"{self.label}: importing the class in its process took longer than {limit:g} s")
        try:
            kind, message = process.conn.recv()
        except (EOFError, OSError):
            code = exit_code(process.proc)
            self.close(kill=True)
            what = f"{self.label}: its process {describe_exit(code)} while importing the class"
            raise (ChildKilled(what) if killed_from_outside(code) else EnvError(what)) from None
        if kind == "error":
            self.close(kill=True)
            raise EnvError(message)

    def _run(self, calls: dict[int, list[tuple[str, int, Any]]]) -> dict[int, Observation | EnvFailure]:
        for k, items in calls.items():
            self._send(self.processes[k], items)
        return self._collect([self.processes[k] for k in calls])

    def _send(self, process: _Process, items: list[tuple[str, int, Any]]) -> None:
        if not process.pending:
            process.since = time.monotonic()
        process.pending.extend((op, episode, _call_name(op, payload)) for op, episode, payload in items)
        try:
            process.conn.send(items)
        except OSError:  # it has ended: _collect reads the end of its connection and says how
            pass

    def _collect(self, processes: list[_Process]) -> dict[int, Observation | EnvFailure]:
        """Read answers until none of `processes` owes one, failing the calls of a process that ends or hangs."""
        results: dict[int, Observation | EnvFailure] = {}
        try:
            waiting = [p for p in processes if p.pending]
            while waiting:
                ready = wait([p.conn for p in waiting], timeout=_TICK_S)
                for process in waiting:
                    if process.conn in ready:
                        self._read(process, results)
                    elif process.proc.poll() is not None:
                        self._ended(process, results, hung=False)
                    elif time.monotonic() - process.since > self.settings.timeout_s + self.grace_s:
                        self._ended(process, results, hung=True)
                waiting = [p for p in waiting if p.pending]
        except BaseException:
            self.close(kill=True)  # the others may still be busy, or hold answers nobody will read
            raise
        return results

    def _read(self, process: _Process, results: dict[int, Observation | EnvFailure]) -> None:
        try:
            while process.pending and process.conn.poll():
                episode, result = process.conn.recv()
                process.pending.pop(0)
                process.since = time.monotonic()  # the next call's clock starts now
                if result is not None:
                    results[episode] = result
                if isinstance(result, EnvFailure):
                    self.episodes.pop(episode, None)
        except (EOFError, OSError):
            self._ended(process, results, hung=False)

    def _ended(self, process: _Process, results: dict[int, Observation | EnvFailure], hung: bool) -> None:
        """The process hung (it is killed) or ended: fail what it owes, and what it hosts at its next call."""
        if hung:
            process.proc.kill()
        code = exit_code(process.proc)
        how = describe_exit(code)
        _, first, call = process.pending[0] if process.pending else (None, None, None)
        home = self.processes.index(process)
        hosted = [e for e, lost in self.episodes.items() if lost is None and e % len(self.processes) == home]
        owes = any(op != "end" for op, _, _ in process.pending)
        if not hung and killed_from_outside(code) and (owes or hosted):
            doing = f"during episode {first}'s {call}" if first is not None else f"hosting {len(hosted)} episode(s)"
            self.close(kill=True)
            raise ChildKilled(f"{self.label}: its process {how} {doing}")
        process.stop()
        process.proc = None
        timeout_s = self.settings.timeout_s
        if hung:
            reason = (f"its process was killed because episode {first}'s {call} ran past timeout_s = {timeout_s:g} s "
                      "and did not stop when interrupted")
        elif first is not None:
            reason = f"its process {how} during episode {first}'s {call}"
        else:
            reason = f"its process {how}"
        for i, (op, episode, call) in enumerate(process.pending):
            if op == "end":
                continue
            self.episodes.pop(episode, None)
            if i > 0:
                results[episode] = EnvFailure("died", f"{self.label}, episode {episode}: {call} not run: {reason}")
            elif hung:
                results[episode] = EnvFailure("timeout", (
                    f"{self.label}, episode {episode}: {call} took longer than timeout_s = {timeout_s:g} s and did not "
                    "stop when interrupted (it caught the alarm's exception or blocked in native code): its process "
                    "was killed"))
            else:
                results[episode] = EnvFailure("died", (
                    f"{self.label}, episode {episode}: {call} ended its process: it {how} "
                    "(os._exit, a crash in native code, out of memory?)"))
        process.pending.clear()
        for episode, lost in self.episodes.items():
            if lost is None and episode % len(self.processes) == home:
                self.episodes[episode] = f"its process ended earlier ({reason})"


class _Process:
    """One child process and what it owes: (op, episode, call's name) of each call sent and not answered."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.stop: Any = lambda: None  # closes the connection and reaps the process (a weakref.finalize)
        self.loading = False  # started, and its "ready" not read yet
        self.pending: list[tuple[str, int, str]] = []
        self.since = 0.0  # when the first pending call started (its request was sent, or the last answer came)


def _call_name(op: str, payload: Any) -> str:
    return f"step of turn {getattr(payload, 'index', '?')}" if op == "step" else op


# --- the child process -------------------------------------------------------------------------------


class _Timeout(BaseException):
    """Raised by SIGALRM inside an environment's call: a BaseException, so its `except Exception` lets it by."""


def serve(conn_fd: int) -> None:
    """The child's main loop: load the class, then run requests until the parent goes away."""
    conn = Connection(conn_fd)
    become_child()
    path, settings = conn.recv()
    sys.path[:] = path  # the parent's: an environment module next to the spec, or put there by a test
    try:
        host = _Host(settings)
    except Exception as err:
        message = str(err) if isinstance(err, EnvError) else (
            f"environment {settings.name} ({settings.cls}): loading it failed with {type(err).__name__}: {err}")
        conn.send(("error", message))
        return
    conn.send(("ready", None))
    try:
        while True:
            for op, episode, payload in conn.recv():
                conn.send((episode, host.run(op, episode, payload)))
    except (EOFError, OSError):  # the parent closed the pool, or is gone: free what the episodes left hold
        for episode in list(host.envs):
            host.close(episode)


class _Host:
    """The environment objects of the episodes a child hosts, and the calls on them, each under the alarm."""

    def __init__(self, settings: EnvSettings) -> None:
        self.cls = load_env_class(settings)
        self.args, self.timeout_s = settings.args, settings.timeout_s
        self.label = f"environment {settings.name} ({settings.cls})"
        self.envs: dict[int, Any] = {}
        self.alarmed = False
        signal.signal(signal.SIGALRM, self._alarm)

    def run(self, op: str, episode: int, payload: Any) -> Observation | EnvFailure | None:
        if op == "end":
            self.close(episode)
            return None
        what = f"{self.label}, episode {episode}: {_call_name(op, payload)}"
        if op == "reset":
            self.close(episode)  # an episode of an earlier batch that was never ended
            call = self._reset
        elif episode not in self.envs:
            return EnvFailure("died", f"{what} not run: the episode is not running in its process")
        else:
            call = self._step
        try:
            value = self._timed(call, episode, payload)
            if self.alarmed:  # it caught the alarm's exception and returned anyway
                raise _Timeout
        except _Timeout:
            failure = EnvFailure("timeout", f"{what} took longer than timeout_s = {self.timeout_s:g} s and was stopped")
        except Exception as err:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            failure = EnvFailure("raised", f"{what} raised {type(err).__name__}: {_one_line(err)} "
                                           f"({frame.filename}:{frame.lineno})", _env_traceback(err))
        else:
            observation, problem = _as_observation(value, none_ok=op == "reset")
            if observation is not None:
                return observation
            failure = EnvFailure("garbage", f"{what} returned {shown(value)}: {problem}")
        self.close(episode)  # a failed episode is over
        return failure

    def _reset(self, episode: int, row: dict[str, Any]) -> Any:
        env = self.envs[episode] = self.cls(**self.args)
        reset = getattr(env, "reset", None)
        return None if reset is None else reset(row)

    def _step(self, episode: int, turn: Turn) -> Any:
        return self.envs[episode].step(turn)

    def close(self, episode: int) -> None:
        close = getattr(self.envs.pop(episode, None), "close", None)
        if close is not None:
            try:
                self._timed(close)
            except (Exception, _Timeout):  # the episode's result is known already: its close cannot change it
                pass

    def _timed(self, fn: Any, *args: Any) -> Any:
        self.alarmed = False
        signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _alarm(self, signum: int, frame: Any) -> None:
        self.alarmed = True
        raise _Timeout


def _as_observation(value: Any, none_ok: bool) -> tuple[Observation | None, str | None]:
    """`value` as a plain Observation (one that unpickles in the parent), or None and what is wrong with it."""
    if value is None and none_ok:
        return Observation(), None
    if isinstance(value, Observation):
        fields = {key: getattr(value, key) for key in ("text", "token_ids", "reward", "done", "tool_errors")}
    elif isinstance(value, dict):
        unknown = set(value) - {"text", "token_ids", "reward", "done", "tool_errors"}
        if unknown:
            return None, f"a dict with keys an Observation does not have ({', '.join(sorted(map(str, unknown)))})"
        fields = {"text": None, "token_ids": None, "reward": 0.0, "done": False, "tool_errors": 0, **value}
    else:
        return None, f"not an Observation{' or None' if none_ok else ''}"
    text, ids, reward, done, errors = (fields[key] for key in ("text", "token_ids", "reward", "done", "tool_errors"))
    if text is not None and not isinstance(text, str):
        return None, f"its text is a {type(text).__name__}, not a str or None"
    if ids is not None and (not isinstance(ids, (list, tuple)) or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) and i >= 0 for i in ids)):
        return None, "its token_ids are not a list of token ids (ints >= 0) or None"
    if text is not None and ids is not None:
        return None, "it gives both text and token_ids (give one of them)"
    if as_score(reward) is None:
        return None, "its reward is not a finite number"
    if not isinstance(done, bool) and not (type(done).__module__ == "numpy" and type(done).__name__ == "bool_"):
        return None, f"its done is a {type(done).__name__}, not a bool"
    if not isinstance(errors, numbers.Integral) or isinstance(errors, bool) or errors < 0:
        return None, "its tool_errors is not an int >= 0"
    return Observation(text=text, token_ids=None if ids is None else [int(i) for i in ids],
                       reward=float(as_score(reward)), done=bool(done), tool_errors=int(errors)), None


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _env_traceback(err: BaseException) -> str:
    """The traceback from the environment's own frames on (this module's frames above them left out)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(err), err, tb))

