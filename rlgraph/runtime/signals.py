"""Preemption: SIGTERM (what a scheduler sends before it kills a job) and Ctrl-C stop a run cleanly.

    stop = StopRequest(log, ends_process=True)  # `rlgraph` itself (cli.main); False for a Python caller
    with stop.installed():         # from the first line of `rlgraph` (cli.main) to the last
        run_plan(..., stop=stop)   # fit() defers from its first step on

- before the training loop (compiling, pre-flight, starting Ray, restoring): a signal stops at once
  (KeyboardInterrupt); `phase` says what the run was doing, for the one line `rlgraph run` prints;
- in the loop: SIGTERM and the first Ctrl-C let the step in progress finish, the loop checkpoints it and
  raises Stopped; a second Ctrl-C stops at once (KeyboardInterrupt), keeping the last complete checkpoint.

Presses are counted as they arrive, not as the handler runs: Python runs a handler only when the main thread
is back in Python code (Ray's driver looks once a second while it waits), and two signals of a kind that arrive
before it looks make one call. The C-level handler writes each signal's number into a wakeup pipe as it comes
(signal.set_wakeup_fd), so a double Ctrl-C within that second is two presses.

The watcher (`ends_process`). Inside some of Ray's C++ calls (ray.init waiting for its GCS, the shutdown of a
recovery's dead processes) the main thread does not come back to Python at all: with the group's Ray ended by
the same signal, Ray's own client ends the process 60 s later ("Failed to connect to GCS", exit 1, no resume
line). So a thread of ours waits on the pipe (poll) and sees each signal as it arrives. When one means "stop at
once" (any signal before the loop defers; a second Ctrl-C) and the handler has not taken it within GRACE_S, or
the run, having taken it, has not ended UNWIND_S after it came (its clean-up waits on a dead Ray), the watcher
ends the run itself: the same last line the main path prints (`last_words`, once, whoever comes first), SIGKILL
to every process below this one (watchdog.kill_descendants), os._exit(128 + signal). A deferred signal it
leaves to the step in progress, which may take longer than any grace, unless the run's Ray has died (a SIGTERM
to the group reaches the GCS too): the step can then never end, and the main thread may wait in a Ray call for
60 s before Ray's client aborts it, so once `ray_alive` (set by run_plan while its Ray is up) has said no for
DEAD_RAY_S the watcher ends the run as above, its line saying that the signal reached Ray. A Python caller's
process (rlgraph.run in a notebook) is not the run's to end: there is no watcher.

One pipe, two readers, no count lost: both the watcher and the handler read it (non-blocking, the handler
because the watcher may not have woken yet when it runs) under one lock, and append what they read to one list
of arrivals; the handler takes the arrivals past those it took before (`_taken`), the watcher only looks at
them, unless it ends the run (then it takes them, so the exit code and the line name the signal). A zero byte
(never a signal's number) tells the watcher that `installed()` is closing.

Ray's driver sets a SIGTERM handler of its own in ray.init (sys.exit) and its C++ core one that prints a
stack dump; cluster.keeping_signal_handlers keeps ours over ray.init. The handlers before `installed()`
come back after.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

SIGNALS = (signal.SIGTERM, signal.SIGINT)
NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}

# The watcher's deadlines, from the arrival of a signal that stops at once (module doc): the handler takes it
# within GRACE_S (it runs once the main thread is back in Python code); the run, having taken it, ends within
# UNWIND_S (its clean-up stops the run's processes and a local Ray: seconds); SAY_S for the last line.
GRACE_S = 3.0
UNWIND_S = 15.0
SAY_S = 2.0
# A deferred stop with the run's Ray dead: the main path ends on its own once a Ray call raises (a worker's death
# is reported in about a second); DEAD_RAY_S after the watcher first finds Ray dead, it ends the run itself.
DEAD_RAY_S = 5.0
RAY_POLL_S = 1.0  # how often the watcher asks `ray_alive` while a deferred stop is pending
RAY_ENDED = " (it reached the run's Ray processes too: its Ray instance ended)"
AGAIN_AFTER_S = 0.05  # a stop lost in a function that cannot raise is raised again this long after (_unraisable_hook)


class _Stop:
    def __repr__(self) -> str:
        return "rlgraph.STOP"


# What an `on_step` callback (rlgraph.run) returns to end the run after that step, with a checkpoint of it, as a
# first Ctrl-C does; the run then returns as one that finished.
STOP = _Stop()


class Stopped(Exception):
    """The loop stopped on a signal after `step`; `checkpoint` holds that step (None: it had trained none)."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None) -> None:
        # the message is what a Python caller (rlgraph.run in a notebook) sees; `rlgraph run` prints its own
        where = f"checkpointed in {checkpoint}" if checkpoint is not None else "nothing was trained"
        super().__init__(f"stopped by {NAMES.get(signum, f'signal {signum}')} after step {step}; {where}")
        self.signum, self.step, self.checkpoint = signum, step, checkpoint

    def __reduce__(self) -> tuple:
        return Stopped, (self.signum, self.step, self.checkpoint)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process the signal ended: 143, 130


class StopRequest:
    """The signals that asked the run to stop, if any. Never set outside `installed()`."""

    def __init__(self, log: Callable[[str], None] | None = None, *, ends_process: bool = False) -> None:
        self.log = log or (lambda message: None)
        self.received: list[int] = []
        self.at_once = False  # a second Ctrl-C, or a signal before the loop: stopped without a checkpoint
        self.deferring = False  # in the loop: a first signal lets the step finish
        self.phase = "starting"  # what the run does before the loop: "while {phase}" in the stop message
        self.run_dir: Path | None = None  # where the run writes, once known: the stop message names its checkpoint
        self.ends_process = ends_process  # the process is `rlgraph` itself: the watcher may end it
        self.last_words: Callable[[], None] = self._default_words  # the line a stop ends with (`say_stopped`)
        self.ray_alive: Callable[[], bool] | None = None  # run_plan's Ray is up (cluster.alive); None: no Ray to ask
        self.cause = ""  # why the watcher ended a deferred stop (RAY_ENDED): for `last_words`
        self._ray_dead_since: float | None = None
        self._previous: dict[int, Any] | None = None
        self._pipe: int | None = None  # the wakeup pipe's read end: one byte per signal as it arrived
        self._lock = threading.RLock()  # the pipe, the arrivals; reentrant: a handler can run inside a handler
        self._arrivals: list[tuple[int, float]] = []  # (signal, time.monotonic() it was read), in order
        self._taken = 0  # the arrivals the handler took (or the watcher, ending the run)
        self._closing = False
        self._said = False
        self._first_at_once: float | None = None  # when the watcher first saw a stop at once the handler took

    @property
    def requested(self) -> bool:
        return bool(self.received)

    @property
    def exit_code(self) -> int:
        return 130 if signal.SIGINT in self.received or not self.received else 143

    @property
    def first_name(self) -> str:
        return NAMES.get(self.received[0], f"signal {self.received[0]}") if self.received else "Ctrl-C"

    def stopped(self, step: int, checkpoint: Path | None) -> Stopped:
        return Stopped(self.received[0], step, checkpoint)

    def say_stopped(self, words: Callable[[], None] | None = None) -> None:
        """Print the run's last line, `words` or else `last_words`: once, from the main path or the watcher."""
        with self._lock:
            if self._said:
                return
            self._said = True
        (words or self.last_words)()

    def _default_words(self) -> None:
        sys.stderr.write(f"rlgraph: stopped by {self.first_name}\n")
        sys.stderr.flush()

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        # signal.signal works in the main thread only; inside an outer installed() the handlers are already ours
        if threading.current_thread() is not threading.main_thread() or self._previous is not None:
            yield self
            return
        self._previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        counting = self._count_arrivals()
        unraisable, sys.unraisablehook = sys.unraisablehook, self._unraisable_hook(sys.unraisablehook)
        self.install()
        try:
            yield self
        finally:
            previous, self._previous = self._previous, None
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            sys.unraisablehook = unraisable
            counting.close()

    def _unraisable_hook(self, theirs: Callable[[Any], None]) -> Callable[[Any], None]:
        """The handler's KeyboardInterrupt can land in a function Python calls where no exception propagates
        (logging's fork hook, run after each fork of ray.init's processes; a __del__): Python prints it as
        "Exception ignored in ..." with a traceback and goes on as if no signal came. Such a stop is raised again
        in the main thread by another thread AGAIN_AFTER_S later (PyThreadState_SetAsyncExc: set from here, or
        while the hook waits for that thread to start, it would be raised inside this hook and lost again),
        without the traceback; landing in such a function again, it comes here
        again. Any other unraisable exception goes to the hook that was there."""

        def raise_in_main() -> None:
            import ctypes

            time.sleep(AGAIN_AFTER_S)  # the hook has returned long before: Thread.start() waits for this thread
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.main_thread().ident),
                                                       ctypes.py_object(KeyboardInterrupt))

        def hook(unraisable: Any) -> None:
            if (isinstance(unraisable.exc_value, KeyboardInterrupt) and self.at_once
                    and threading.current_thread() is threading.main_thread()):
                threading.Thread(target=raise_in_main, name="rlgraph-stop-again", daemon=True).start()
                return
            theirs(unraisable)

        return hook

    def _count_arrivals(self) -> contextlib.ExitStack:
        """The wakeup pipe and its watcher, unless something else (an asyncio loop) has a wakeup fd: then each
        handler call is a press, and nothing watches."""
        stack = contextlib.ExitStack()
        read_end, write_end = os.pipe()
        for fd in (read_end, write_end):
            os.set_blocking(fd, False)
            stack.callback(os.close, fd)
        theirs = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        if theirs != -1:
            signal.set_wakeup_fd(theirs)
            stack.close()
            return stack
        self._pipe, self._closing = read_end, False
        stack.callback(setattr, self, "_pipe", None)
        if self.ends_process:
            watcher = threading.Thread(target=self._watch, args=(read_end,), name="rlgraph-stop-watcher", daemon=True)
            watcher.start()
            stack.callback(watcher.join, 5.0)
            stack.callback(os.write, write_end, b"\0")  # the watcher's cue to end (after the line below)
        stack.callback(signal.set_wakeup_fd, -1)  # run first: nothing writes into the pipe once it closes
        return stack

    def _read_pipe(self) -> None:
        """Append what arrived in the pipe to the arrivals (hold `_lock`)."""
        if self._pipe is None:
            return
        arrived = b""
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self._pipe, 256):
                arrived += chunk
        now = time.monotonic()
        self._closing = self._closing or 0 in arrived
        self._arrivals.extend((number, now) for number in arrived if number in SIGNALS)

    def _arrived(self, signum: int) -> list[int]:
        """The signals of ours that arrived since the handler last ran (`signum` itself without the pipe)."""
        if self._pipe is None:
            return [signum]
        self._read_pipe()
        # a signal that arrives while the handler runs was read above and trips the handler once more: that
        # call finds nothing new, and counts nothing
        taken, self._taken = self._taken, len(self._arrivals)
        return [number for number, _ in self._arrivals[taken:]]

    def install(self) -> None:
        """(Re)install the handlers: inside `installed()` only, e.g. after something replaced them."""
        if self._previous is None:
            return
        for signum in SIGNALS:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        with self._lock:
            was_at_once = self.at_once
            for arrived in self._arrived(signum):
                self._receive(arrived)
            # once: what everything already unwinds on (actors, Ray and the console stop); a later press must not
            # cut that clean-up short
            raise_now = self.at_once and not was_at_once
        if raise_now:
            raise KeyboardInterrupt

    def _receive(self, signum: int) -> None:
        self.received.append(signum)
        if _stops_at_once(signum, len(self.received) - 1, self.deferring):
            self.at_once = True
            return
        if len(self.received) > 1:  # a repeated SIGTERM, or SIGTERM after Ctrl-C: already stopping
            return
        again = " (Ctrl-C again stops at once, without it)" if signum == signal.SIGINT else ""
        self.log(f"[yellow]{NAMES[signum]}[/]: stopping after the step in progress, with a checkpoint of it{again}")

    # --- the watcher

    def _watch(self, read_end: int) -> None:
        poller = select.poll()
        poller.register(read_end, select.POLLIN)
        while True:
            with self._lock:
                self._read_pipe()
                if self._closing:
                    return
                deadline = self._deadline()
                waiting_on_ray = deadline is None and self._deferred_pending() and self.ray_alive is not None
            if deadline is not None and time.monotonic() >= deadline:
                self._end_process()
                return
            if waiting_on_ray and self._ray_ended():
                self.cause = RAY_ENDED
                self._end_process()
                return
            wait_ms = None if deadline is None else max(1, int((deadline - time.monotonic()) * 1000) + 1)
            if waiting_on_ray:
                wait_ms = min(wait_ms or int(RAY_POLL_S * 1000), int(RAY_POLL_S * 1000))
            with contextlib.suppress(InterruptedError):
                poller.poll(wait_ms)

    def _deferred_pending(self) -> bool:
        """A stop that waits for the step in progress: in the loop, a signal arrived (hold `_lock`)."""
        return self.deferring and bool(self.received or self._arrivals[self._taken:])

    def _ray_ended(self) -> bool:
        """Whether the run's Ray has been found dead for DEAD_RAY_S (asked outside `_lock`: it takes a second)."""
        ask = self.ray_alive
        try:
            alive = ask is None or ask()
        except Exception:  # a Ray half torn down: ask again next time
            alive = True
        if alive:
            self._ray_dead_since = None
            return False
        now = time.monotonic()
        self._ray_dead_since = self._ray_dead_since or now
        return now - self._ray_dead_since >= DEAD_RAY_S

    def _deadline(self) -> float | None:
        """When the watcher ends the run: GRACE_S after an at-once signal the handler has not taken, UNWIND_S
        after one it took (the run unwinds); None while nothing stops at once (hold `_lock`)."""
        received = len(self.received)
        for index, (signum, arrived) in enumerate(self._arrivals):
            if index < self._taken:
                continue
            if _stops_at_once(signum, received + index - self._taken, self.deferring):
                first = self._first_at_once or arrived
                return min(arrived + GRACE_S, first + UNWIND_S)
        if self.at_once:  # taken by the handler: the run unwinds (or the handler read it before the watcher did)
            self._first_at_once = self._first_at_once or time.monotonic()
            return self._first_at_once + UNWIND_S
        return None

    def _end_process(self) -> None:
        """What the main path would do, without it: the last line, every process below this one killed, the exit."""
        with self._lock:
            self.received.extend(number for number, _ in self._arrivals[self._taken:])
            self._taken = len(self._arrivals)
            self.at_once = True
            code = self.exit_code
        # the line in a thread of its own: a console lock the stuck main thread holds must not keep the run alive
        saying = threading.Thread(target=self.say_stopped, name="rlgraph-last-words", daemon=True)
        saying.start()
        saying.join(SAY_S)
        from rlgraph.runtime.watchdog import kill_descendants

        with contextlib.suppress(Exception):
            kill_descendants()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _stops_at_once(signum: int, before: int, deferring: bool) -> bool:
    """Whether a signal, after `before` others, stops at once: out of the loop any does; in it a Ctrl-C after
    another signal does."""
    return not deferring or (signum == signal.SIGINT and before > 0)
