"""Run safety, as a user meets it: a scheduler's SIGTERM and Ctrl-C stop a run with a checkpoint of the
step in progress and print the command that resumes it; a second Ctrl-C stops at once; a second run into
a busy directory is refused at once and harms nothing; nothing the run started outlives it.

One run directory goes through most of it: started in a subprocess (its own local Ray) and stopped by
SIGTERM, then resumed in this process with the printed command, stopped by Ctrl-C, and resumed to the
end. A signal sent just after a step's metrics line lands in the middle of the next step.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlgraph.runtime.driver import RemoteStep
from rlgraph.runtime.step import StepRunner

from .helpers import REPO, fast, read_metrics

SPEC = "specs/grpo_arith.rl"
STEPS = 8
OVERRIDES = fast(steps=STEPS, batch_size=64)
RESUME = re.compile(r"Resume with: (rlgraph run .*)$", re.MULTILINE)


def last_step(run_dir: Path) -> int:
    try:
        return read_metrics(run_dir)[-1]["training/global_step"]
    except (OSError, ValueError, IndexError, KeyError):  # not written yet, or a line half written
        return -1


def checkpoint_steps(run_dir: Path) -> list[int]:
    folder = run_dir / "checkpoints"
    return sorted(int(p.name[5:]) for p in folder.glob("step_*")) if folder.is_dir() else []


def wait_until(condition, timeout: float, stop: threading.Event | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        if condition():
            return True
        time.sleep(0.02)
    return False


def descendants(pid: int) -> dict[int, str]:
    """The processes below `pid` (Ray's gcs, raylet, agents, workers), by pid, with their command lines."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            with contextlib.suppress(OSError):
                found[child] = (Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:100])
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlgraph.cli", "run", *map(str, args)]


@pytest.fixture(scope="module")
def state() -> dict:
    return {}  # the run directory and its resume command, from the first test to the second


def test_sigterm_checkpoints_the_step_in_progress_and_a_second_run_is_refused(arith_model, tmp_path_factory, state):
    run_dir = tmp_path_factory.mktemp("safety") / "run"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = subprocess.Popen(cli(SPEC, "--output", run_dir, *OVERRIDES), cwd=REPO, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: last_step(run_dir) >= 1 or first.poll() is not None, 300), "no step in 300 s"
        assert first.poll() is None, first.communicate()[0]

        # --- a second run into the same directory: refused before it starts anything, naming the first (what it
        # prints is the refusal alone, no Ray start; no time is asserted: the machine may be busy)
        second = subprocess.run(cli(SPEC, "--output", run_dir, *OVERRIDES), cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=60)
        refusal = second.stdout + second.stderr
        assert second.returncode == 1, refusal
        assert "this one did not start" in refusal and "Ray" not in refusal, refusal
        assert f"process {first.pid} on " in refusal and "another --output" in refusal, refusal
        assert "Traceback" not in refusal

        # --- SIGTERM: the step in progress finishes and is checkpointed; exit 143
        ray_processes = descendants(first.pid)
        done = last_step(run_dir)
        first.send_signal(signal.SIGTERM)
        out, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143, out
    assert "Traceback" not in out and "SIGTERM received" not in out, out  # no C++ stack dump from Ray
    stopped_at = done + 1
    assert checkpoint_steps(run_dir)[-1] == stopped_at == last_step(run_dir), out
    assert f"stopped by SIGTERM after step {stopped_at}" in out, out
    resume = RESUME.search(out)
    assert resume, out

    # --- nothing the run started outlives it by more than a few seconds
    assert ray_processes, "the run started no processes?"
    assert wait_until(lambda: not any(alive(pid) for pid in ray_processes), 10), \
        [args for pid, args in ray_processes.items() if alive(pid)]
    state.update(run_dir=run_dir, resume=resume.group(1), stopped_at=stopped_at)


@contextlib.contextmanager
def ctrl_c(after_step: int, times: int = 1, gap: float | None = None):
    """Press Ctrl-C (SIGINT to this process) `times` times once step `after_step + 1` is in progress (the
    driver waits for its results), each after the run handled the one before, as a person does who has seen
    the first one's message; with `gap`, each `gap` seconds after the one before, handled or not (a quick
    double press: Ray's driver looks at signals once a second while it waits). Yields [(the last finished
    step when it was sent, when)].

    The step in progress is seen from inside, not from metrics.jsonl: its line is written before the step's
    checkpoint is published, and a press in between stops the run after that step, before the next begins."""
    sent: list[tuple[int, float]] = []
    finished, begun = threading.Event(), threading.Event()
    in_progress: list[int] = []  # the step whose results the driver waits for, while it waits
    runners = (StepRunner, RemoteStep)  # a step through Ray, or the whole step in the plan's one process
    finishes = {runner: runner.finish for runner in runners}

    def watched(runner, flight):
        in_progress.append(flight.step)
        if flight.step > after_step:
            begun.set()
        try:
            return finishes[type(runner)](runner, flight)
        finally:
            in_progress.remove(flight.step)

    def handled(count: int) -> bool:
        stop = getattr(signal.getsignal(signal.SIGINT), "__self__", None)  # the run's StopRequest
        return stop is not None and len(stop.received) >= count

    def press() -> None:
        while not (begun.wait(0.05) or finished.is_set()):
            pass
        for i in range(times):
            if i and gap is not None:
                time.sleep(gap)
            if finished.is_set() or (i and gap is None and not wait_until(lambda: handled(i), 10, stop=finished)):
                return
            sent.append((after_step if after_step + 1 in in_progress else -1, time.monotonic()))
            os.kill(os.getpid(), signal.SIGINT)

    # A Ctrl-C that comes after the run gave its handlers back must not stop pytest.
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    for runner in runners:
        runner.finish = watched
    presser = threading.Thread(target=press, daemon=True)
    presser.start()
    try:
        yield sent
    finally:
        finished.set()
        presser.join(timeout=5)
        for runner in runners:
            runner.finish = finishes[runner]
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_checkpoints_the_step_in_progress_and_the_printed_command_trains_to_the_end(run_cli, state):
    if not state:
        pytest.skip("needs the run of the SIGTERM test")
    run_dir, args = state["run_dir"], shlex.split(state["resume"])[2:]  # `rlgraph run ARGS`
    assert args[-2:] == ["--output", str(run_dir)]

    # --- Ctrl-C once: the step in progress finishes and is checkpointed; exit 130
    with ctrl_c(after_step=state["stopped_at"] + 1) as sent:
        code, out = run_cli(*args)
    assert code == 130, out
    assert len(sent) == 1, out
    stopped_at = sent[0][0] + 1
    assert checkpoint_steps(run_dir)[-1] == stopped_at == last_step(run_dir), out
    assert f"stopped by Ctrl-C after step {stopped_at}" in out and RESUME.search(out).group(1) == state["resume"], out

    # --- the printed command goes on to the end: every step's metrics once, the first run's included
    code, out = run_cli(*args)
    assert code == 0, out
    assert "resuming from" in out and f"step_{stopped_at}" in out, out
    assert [r["training/global_step"] for r in read_metrics(run_dir)] == list(range(STEPS + 1))
    assert checkpoint_steps(run_dir)[-1] == STEPS


def test_a_second_ctrl_c_stops_at_once_and_names_the_last_checkpoint(run_cli, tmp_path):
    # steps of several seconds: both presses land in step 2 (256 prompts a step once let the step end before the
    # second press, whose sender waits up to Ray's one-second look at signals for the first); sent[1][0] == 1
    # says step 2 was still in progress at the second press
    with ctrl_c(after_step=1, times=2) as sent:
        code, out = run_cli(SPEC, "--output", tmp_path, *fast(steps=3, batch_size=512, checkpoint_every=1))
        returned = time.monotonic()
    assert code == 130, out
    assert len(sent) == 2 and sent[1][0] == 1, (sent, out)
    assert returned - sent[1][1] < 5, f"stopped {returned - sent[1][1]:.1f} s after the second Ctrl-C"
    assert checkpoint_steps(tmp_path) == [1], out  # the step in progress was not checkpointed
    assert "stopped at once; the last complete checkpoint is step 1" in out, out
    assert "Traceback" not in out and RESUME.search(out), out


def test_a_quick_double_ctrl_c_is_two_presses_and_stops_at_once(run_cli, tmp_path):
    # two presses 0.1 s apart, both while the driver waits inside Ray (which runs Python's handler once a second):
    # once counted as one press, so the run finished the step and checkpointed it
    with ctrl_c(after_step=1, times=2, gap=0.1) as sent:
        code, out = run_cli(SPEC, "--output", tmp_path, *fast(steps=3, batch_size=512, checkpoint_every=1))
    assert code == 130, out
    assert len(sent) == 2 and sent[1][0] == 1, (sent, out)  # both landed in step 2
    assert "stopped at once; the last complete checkpoint is step 1" in out, out
    assert checkpoint_steps(tmp_path) == [1], out
    assert "Traceback" not in out and RESUME.search(out), out
