"""Preemption: SIGTERM (what a scheduler sends before it kills a job) and Ctrl-C stop a run cleanly.

    stop = StopRequest(log)
    with stop.installed():         # from the first line of `rlgraph` (cli.main) to the last
        run_plan(..., stop=stop)   # fit() defers from its first step on

- before the training loop (compiling, pre-flight, starting Ray, restoring): a signal stops at once
  (KeyboardInterrupt); `phase` says what the run was doing, for the one line `rlgraph run` prints;
- in the loop: SIGTERM and the first Ctrl-C let the step in progress finish, the loop checkpoints it and
  raises Stopped; a second Ctrl-C stops at once (KeyboardInterrupt), keeping the last complete checkpoint.

Presses are counted as they arrive, not as the handler runs: Python runs a handler only when the main thread
is back in Python code (Ray's driver looks once a second while it waits), and two signals of a kind that arrive
before it looks make one call. The C-level handler writes each signal's number into a wakeup pipe as it comes
(signal.set_wakeup_fd); the handler reads them all, so a double Ctrl-C within that second is two presses.

Ray's driver sets a SIGTERM handler of its own in ray.init (sys.exit) and its C++ core one that prints a
stack dump; cluster.keeping_signal_handlers keeps ours over ray.init. The handlers before `installed()`
come back after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

SIGNALS = (signal.SIGTERM, signal.SIGINT)
NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}


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

    def __init__(self, log: Callable[[str], None] | None = None) -> None:
        self.log = log or (lambda message: None)
        self.received: list[int] = []
        self.at_once = False  # a second Ctrl-C, or a signal before the loop: stopped without a checkpoint
        self.deferring = False  # in the loop: a first signal lets the step finish
        self.phase = "starting"  # what the run does before the loop: "while {phase}" in the stop message
        self.run_dir: Path | None = None  # where the run writes, once known: the stop message names its checkpoint
        self._previous: dict[int, Any] | None = None
        self._arrivals: int | None = None  # the wakeup pipe's read end: one byte per signal as it arrived

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

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopRequest]:
        # signal.signal works in the main thread only; inside an outer installed() the handlers are already ours
        if threading.current_thread() is not threading.main_thread() or self._previous is not None:
            yield self
            return
        self._previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
        counting = self._count_arrivals()
        self.install()
        try:
            yield self
        finally:
            previous, self._previous = self._previous, None
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            counting.close()

    def _count_arrivals(self) -> contextlib.ExitStack:
        """The wakeup pipe, unless something else (an asyncio loop) has one: then each handler call is a press."""
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
        self._arrivals = read_end
        stack.callback(setattr, self, "_arrivals", None)
        stack.callback(signal.set_wakeup_fd, -1)  # run first: nothing writes into the pipe once it closes
        return stack

    def _arrived(self, signum: int) -> list[int]:
        """The signals of ours that arrived since the handler last ran (`signum` itself without the pipe)."""
        if self._arrivals is None:
            return [signum]
        arrived = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._arrivals, 256):
                arrived += chunk
        # a signal that arrives while the handler runs was read above and trips the handler once more: that
        # call finds nothing new, and counts nothing
        return [number for number in arrived if number in SIGNALS]

    def install(self) -> None:
        """(Re)install the handlers: inside `installed()` only, e.g. after something replaced them."""
        if self._previous is None:
            return
        for signum in SIGNALS:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        was_at_once = self.at_once
        for arrived in self._arrived(signum):
            self._receive(arrived)
        # once: what everything already unwinds on (actors, Ray and the console stop); a later press must not
        # cut that clean-up short
        if self.at_once and not was_at_once:
            raise KeyboardInterrupt

    def _receive(self, signum: int) -> None:
        self.received.append(signum)
        if not self.deferring or (signum == signal.SIGINT and len(self.received) > 1):
            self.at_once = True
            return
        if len(self.received) > 1:  # a repeated SIGTERM, or SIGTERM after Ctrl-C: already stopping
            return
        again = " (Ctrl-C again stops at once, without it)" if signum == signal.SIGINT else ""
        self.log(f"[yellow]{NAMES[signum]}[/]: stopping after the step in progress, with a checkpoint of it{again}")
