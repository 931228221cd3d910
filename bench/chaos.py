"""Chaos: kill a random process of a training run at random moments, many times, then check that nothing
was lost or mixed.

    .venv/bin/python bench/chaos.py [--kills 20] [--steps S] [--seed 0] [--spec specs/grpo_arith_tool.rl]
    # writes bench/results/chaos.json

First an uninterrupted reference run of the spec (specs/grpo_arith.rl by default; a checkpoint after every
step), then the same command into another folder, hit `--kills` times. Each hit takes, in turn (then shuffled):

- `driver`: SIGKILL to the `rlgraph run` process; it is re-run with the same command (it resumes);
- `worker`: SIGKILL to one of its Ray worker processes (found below the driver's pid in /proc, never by name:
  other people's Ray runs on the same machine); the run recovers by itself (`train.max_failures`);
- `reward`: SIGKILL to one of a reward function's processes (the driver's children); one killed while scoring
  is recovered from as a worker is, one killed between batches is replaced at the next batch (a kill aimed at
  a step waits for one that works: its CPU time grows);
- `env`: SIGKILL to one of an environment's processes (the rollout worker's children; only with a spec that
  has an `env` block, e.g. specs/grpo_arith_tool.rl): the same;
- `group_sigterm`: SIGTERM to the run's whole process group (a batch scheduler, a container stop);
- `startup_ctrl_c`: Ctrl-C during start-up (SIGINT to the group, as a terminal sends it).

After a signal the run must exit within SIGNAL_EXIT_S (never waiting on its dead Ray) and without a
traceback; it is then re-run. The moment is drawn from three kinds: inside a checkpoint write (the moment a
`.step_<N>.tmp-*` folder appears, plus a random part of a write's duration), during a step, or during
start-up (always, for Ctrl-C). At the end the run must finish, and:

- every `step_<N>` checkpoint verifies against its manifest, and no checkpoint was found damaged
  (set aside as `step_<N>.corrupt` by a resume);
- metrics.jsonl has the lines of steps 0..S, each exactly once;
- the last checkpoint's weights equal the reference run's, bit for bit, and so does each step's reward.

- no process that was killed, or signalled, made the run hang, stop for good or print a traceback.

Each run is a subprocess with a local Ray of its own (RAY_ADDRESS is dropped). Processes of a killed driver
that outlive it (Ray's agents linger ~60 s) are counted and, at the end, killed by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from common import RLGRAPH, ROOT, load_average, machine_facts, median, write_result

SPEC = "specs/grpo_arith.rl"
# Ray's own helpers below a driver; every other `ray::` process is a worker of the run (an actor)
RAY_HELPERS = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")
RUN_TIMEOUT_S = 600.0  # one attempt, start to end
STALL_S = 180.0  # a run that neither goes on nor exits this long after a worker was killed hangs
MOMENTS = ("checkpoint", "step", "start")
# in this order a short chaos run (--kills 2) still kills a driver and a worker
TARGETS = ("driver", "worker", "reward", "env", "group_sigterm", "startup_ctrl_c")
SIGNALS = {"group_sigterm": signal.SIGTERM, "startup_ctrl_c": signal.SIGINT}  # sent to the process group
# what a child process of user code runs (rlgraph/workers/reward_process.py, rlgraph/workers/envs/pool.py)
CHILD_CODE = {"reward": "rlgraph.workers.reward_process import serve", "env": "rlgraph.workers.envs.pool import serve"}
SIGNAL_EXIT_S = 30.0  # a signalled run that has not exited after this long waits on something dead


def overrides(steps: int, max_failures: int | None) -> list[str]:
    sets = [f"train.steps={steps}", "train.checkpoint_every=1", "data.batch_size=16", "train.validate_every=0"]
    if max_failures is not None:
        sets.append(f"train.max_failures={max_failures}")
    return sets


def command(run_dir: Path, sets: list[str], spec: str = SPEC) -> list[str]:
    out = [*RLGRAPH, "run", spec, "--output", str(run_dir)]
    for item in sets:
        out += ["-s", item]
    return out


def supports_max_failures() -> bool:
    from rlgraph.lang.schema import BLOCKS

    return "max_failures" in BLOCKS["train"].keys


# --- the processes of one run, from /proc ---


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks): the start time tells a pid reused by another process apart."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid: int) -> dict[int, tuple[int, str]]:
    """Every process below `pid`: pid -> (start time, command line)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))):
            children.setdefault(stat[0], []).append(int(entry))
            starts[int(entry)] = stat[1]
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            found[child] = (starts[child], cmdline.strip())
            todo.append(child)
    return found


def workers(driver: int) -> dict[int, str]:
    """The run's worker processes (Ray actors: `ray::DeviceProcess...`) below the driver."""
    return {pid: cmd.split()[0] for pid, (_, cmd) in descendants(driver).items()
            if cmd.startswith("ray::") and not cmd.startswith(RAY_HELPERS)}


def children(driver: int, kind: str) -> dict[int, str]:
    """The run's processes of user code of `kind` (reward | env), at any depth below the driver."""
    return {pid: f"{kind} process" for pid, (_, cmd) in descendants(driver).items() if CHILD_CODE[kind] in cmd}


def cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, ValueError, IndexError):
        return None


def busy_child(attempt: Attempt, kind: str, timeout_s: float = 5.0) -> int | None:
    """One of the run's processes of `kind` the moment it is seen working (its CPU time grows): a process
    scoring rows or hosting an episode's call, not one idle between batches. None if none works in time."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and attempt.running():
        for pid in children(attempt.pid, kind):
            ticks = cpu_ticks(pid)
            if ticks is not None and pid in seen and ticks > seen[pid]:
                return pid
            if ticks is not None:
                seen[pid] = ticks
        time.sleep(0.005)
    return None


def has_env(spec: str) -> bool:
    return re.search(r"^\s*env\s+\w+\s*\{", (ROOT / spec).read_text(), re.M) is not None


def alive(pid: int, start: int | None = None) -> bool:
    stat = _stat(pid)
    if stat is None or (start is not None and stat[1] != start):
        return False
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


# --- the run directory, as seen from outside ---


def metrics_steps(run_dir: Path) -> list[int]:
    """global_step of every whole line of metrics.jsonl (a line being written is left out)."""
    try:
        text = (run_dir / "metrics.jsonl").read_text()
    except OSError:
        return []
    steps = []
    for line in text[: text.rfind("\n") + 1].splitlines():
        try:
            steps.append(int(json.loads(line)["training/global_step"]))
        except (ValueError, KeyError, TypeError):
            steps.append(-1)  # a damaged line: the check reports it
    return steps


def last_step(run_dir: Path) -> int:
    steps = metrics_steps(run_dir)
    return steps[-1] if steps else -1


def hidden_folders(run_dir: Path) -> set[str]:
    """Checkpoint folders being written (`.step_<N>.tmp-<pid>-*`) or deleted (`.deleting-*`), or left so."""
    try:
        return {n for n in os.listdir(run_dir / "checkpoints") if n.startswith((".step_", ".deleting-"))}
    except OSError:
        return set()


def training_started(run_dir: Path, since: float) -> bool:
    """The run is in its training loop: it rewrote metrics.jsonl (it does so on entering it) after `since`."""
    try:
        return (run_dir / "metrics.jsonl").stat().st_mtime >= since
    except OSError:
        return False


# --- one `rlgraph run`, and killing it ---


class Attempt:
    """One `rlgraph run` of the chaos run, its output in a log file."""

    def __init__(self, cmd: list[str], run_dir: Path, log: Path) -> None:
        self.log = log
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray of its own
        env.update(PYTHONUNBUFFERED="1", COLUMNS="200", TERM="dumb")
        # this checkout's rlgraph in the Ray workers and their children too, whichever one is installed
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        self.started = time.time()
        self.run_dir = run_dir
        self.stale = hidden_folders(run_dir)  # a killed run's leftovers, until this one sweeps them
        with open(log, "w") as out:
            self.process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.process.pid

    def checkpoint_writes(self) -> list[str]:
        """This run's checkpoint writes (a tmp folder named with its pid) and deletions in progress."""
        return sorted(n for n in hidden_folders(self.run_dir) - self.stale
                      if (n.startswith(".step_") and f".tmp-{self.pid}-" in n) or n.startswith(".deleting-"))

    def running(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Nothing of this attempt keeps running: its process group (the driver and what did not leave it)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()


class Progress:
    """Every line of metrics.jsonl with the time it was first seen (polled every 20 ms): when a run went on
    after a kill. The first record after a start or a recovery carries `startup_s/total` (and, after a
    recovery, `training/recoveries`)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.lines: dict[str, float] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(0.02):
            try:
                text = self.path.read_text()
            except OSError:
                continue
            now = time.time()
            with self.lock:
                for line in text[: text.rfind("\n") + 1].splitlines():
                    self.lines.setdefault(line, now)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def first_line(self, since: float) -> str | None:
        """The first line that appeared after `since`."""
        with self.lock:
            after = [(t, line) for line, t in self.lines.items() if t >= since]
        return min(after)[1] if after else None

    def first(self, since: float, key: str) -> float | None:
        """When the first line holding `key` written after `since` appeared."""
        with self.lock:
            times = [t for line, t in self.lines.items() if t >= since and f'"{key}"' in line]
        return min(times) if times else None


@dataclass
class Kill:
    target: str  # one of TARGETS
    moment: str  # what was aimed at: checkpoint | step | start
    in_checkpoint_write: bool  # what was hit: a checkpoint folder was being written or deleted at the kill
    in_training: bool  # the attempt had entered its training loop (else it was starting up)
    process: str  # the killed process's title
    at_step: int  # the last metrics line at the kill
    after_s: float  # into the attempt
    at: float  # time.time() of the kill
    # recovered (by the run itself) | replaced (a process of user code killed between batches: started anew at
    # the next one, no step lost) | restarted (re-run) | finished (it was past its last step)
    outcome: str = ""
    signal: str = "SIGKILL"
    exit_s: float | None = None  # a signalled run: from the signal to its exit
    exit_code: int | None = None  # ... its exit code
    back_to_training_s: float | None = None  # from the kill to the first record after a restart or recovery


@dataclass
class Chaos:
    steps: int
    kills: list[Kill] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unexpected: a hang, a failed attempt nobody killed
    # below killed drivers: pid -> (start time, command line, when its driver was killed)
    stragglers: dict[int, tuple[int, str, float]] = field(default_factory=dict)


def wait_until(condition: Callable[[], bool], timeout_s: float, attempt: Attempt, poll_s: float = 0.002) -> bool:
    """True once `condition` holds; False if the attempt ended or the time ran out first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if not attempt.running():
            return False
        time.sleep(poll_s)
    return False


def aim(attempt: Attempt, run_dir: Path, target: str, moment: str, rng: random.Random, times: dict[str, float]) -> bool:
    """Wait for the chosen kind of moment; False if the attempt ended first."""
    if target == "worker" and not wait_until(lambda: bool(workers(attempt.pid)), RUN_TIMEOUT_S, attempt, 0.05):
        return False
    if target in CHILD_CODE and not wait_until(lambda: bool(children(attempt.pid, target)), RUN_TIMEOUT_S, attempt,
                                               0.05):
        return False
    if moment == "start":
        # somewhere in start-up (Ray, actors, model loads, restore), at the latest as the training loop begins
        at = attempt.started + rng.uniform(0, times["startup_s"])
        return wait_until(lambda: time.time() >= at or training_started(run_dir, attempt.started), RUN_TIMEOUT_S,
                          attempt, 0.01)
    if moment == "checkpoint":
        # somewhere in the write, its sealing, the step's metrics line or the publish; a write that ended before
        # the moment came (a faster write than the reference's) is let go, and the next one aimed at earlier
        longest, tried = times["checkpoint_s"], set()

        def new_write() -> bool:
            return any(n.startswith(".step_") and n not in tried for n in attempt.checkpoint_writes())

        while True:
            if not wait_until(new_write, RUN_TIMEOUT_S, attempt):
                return False
            tried.update(attempt.checkpoint_writes())
            time.sleep(rng.uniform(0, longest))
            if not attempt.running() or attempt.checkpoint_writes():
                return attempt.running()
            longest /= 2
    # a step: once the training loop runs, up to two steps later
    if not wait_until(lambda: training_started(run_dir, attempt.started), RUN_TIMEOUT_S, attempt, 0.01):
        return False
    time.sleep(rng.uniform(0, 2 * times["step_s"]))
    return attempt.running()


def kill(attempt: Attempt, run_dir: Path, target: str, moment: str, rng: random.Random, chaos: Chaos) -> Kill | None:
    """SIGKILL to the driver or one of its processes, or a signal to its process group; None if there was none to
    kill (the run ended)."""
    whole_run = target == "driver" or target in SIGNALS
    below = descendants(attempt.pid) if whole_run else {}
    sig = SIGNALS.get(target, signal.SIGKILL)
    if whole_run:
        pid, title = attempt.pid, "rlgraph run" + (" and its process group" if target in SIGNALS else "")
    else:
        found = workers(attempt.pid) if target == "worker" else children(attempt.pid, target)
        if not found:
            return None
        pid = rng.choice(sorted(found))
        if target in CHILD_CODE and moment == "step":  # the step's kill of user code's process takes it at work
            pid = busy_child(attempt, target) or pid
        title = found.get(pid, f"{target} process")
    writing, training = bool(attempt.checkpoint_writes()), training_started(run_dir, attempt.started)
    try:
        if target in SIGNALS:
            os.killpg(pid, sig)  # the attempt leads a session of its own: its group is the run's processes
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return None
    record = Kill(target, moment, writing, training, title, last_step(run_dir), time.time() - attempt.started,
                  time.time(), signal=signal.Signals(sig).name)
    if whole_run:
        chaos.stragglers.update({p: (start, cmd, time.time()) for p, (start, cmd) in below.items()})
    return record


def after_worker_kill(attempt: Attempt, killed: Kill, progress: Progress) -> str:
    """Wait for the run to go on by itself (a record of a recovery) or to exit: recovered | finished | exited |
    hung."""
    if wait_until(lambda: progress.first(killed.at, "training/recoveries") is not None, STALL_S, attempt, 0.02):
        return "recovered"
    if attempt.running():
        return "hung"
    # exit 0 without a later line: the kill came after the last step (the run was shutting down)
    return "finished" if attempt.process.returncode == 0 else "exited"


def after_child_kill(attempt: Attempt, killed: Kill, progress: Progress) -> str:
    """A process of user code killed: wait for the run's next metrics line, or its exit. recovered (that line is
    a recovery's) | replaced (the run went on without one: the process was between batches) | finished | exited
    | hung."""
    if wait_until(lambda: progress.first_line(killed.at) is not None, STALL_S, attempt, 0.02):
        return "recovered" if '"training/recoveries"' in progress.first_line(killed.at) else "replaced"
    if attempt.running():
        return "hung"
    return "finished" if attempt.process.returncode == 0 else "exited"


def after_signal(attempt: Attempt, killed: Kill, chaos: Chaos) -> None:
    """A signalled run must exit by itself, soon (its Ray is dead or dying), without a traceback."""
    try:
        attempt.process.wait(timeout=SIGNAL_EXIT_S)
    except subprocess.TimeoutExpired:
        chaos.problems.append(f"the run was still running {SIGNAL_EXIT_S:.0f} s after kill {len(chaos.kills)} "
                              f"({killed.signal} to its group; log {attempt.log}):\n{attempt.tail()}")
        attempt.stop()
        return
    killed.exit_s, killed.exit_code = time.time() - killed.at, attempt.process.returncode
    if "Traceback (most recent call last)" in attempt.log.read_text(errors="replace"):
        chaos.problems.append(f"a traceback after kill {len(chaos.kills)} ({killed.signal} to its group; log "
                              f"{attempt.log}):\n{attempt.tail(40)}")


def plan_kills(kills: int, rng: random.Random, env: bool) -> list[tuple[str, str]]:
    """(target, moment) of each kill: the targets in turn, the moments in turn, each list shuffled."""
    available = [t for t in TARGETS if t != "env" or env]
    targets = [available[i % len(available)] for i in range(kills)]
    rng.shuffle(targets)
    moments = [MOMENTS[i % len(MOMENTS)] for i in range(kills)]
    rng.shuffle(moments)
    return [(t, "start" if t == "startup_ctrl_c" else m) for t, m in zip(targets, moments)]


def chaos_run(run_dir: Path, cmd: list[str], kills: int, rng: random.Random, times: dict[str, float],
              logs: Path, steps: int, env: bool = False) -> Chaos:
    chaos = Chaos(steps)
    attempt: Attempt | None = None
    started: list[Attempt] = []

    def start(reason: str) -> Attempt:
        new = Attempt(cmd, run_dir, logs / f"attempt_{len(started) + 1:02d}.log")
        started.append(new)
        chaos.attempts.append({"reason": reason, "log": str(new.log), "exit": None})
        return new

    def ended(which: Attempt) -> None:
        chaos.attempts[started.index(which)]["exit"] = which.process.returncode

    progress = Progress(run_dir)
    try:
        attempt = start("first")
        plan = plan_kills(kills, rng, env)
        failures_in_a_row = 0
        while plan or attempt.running():
            if not attempt.running():
                ended(attempt)
                if attempt.process.returncode == 0:
                    break  # finished: the kills left find no run
                failures_in_a_row += 1
                chaos.problems.append(f"attempt {len(started)} exited {attempt.process.returncode} without a kill "
                                      f"(log {attempt.log}):\n{attempt.tail()}")
                if failures_in_a_row >= 3:
                    break
                attempt = start("failed by itself")
                continue
            if not plan:  # no kills left: let it finish
                try:
                    attempt.process.wait(timeout=RUN_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    chaos.problems.append(f"attempt {len(started)} still running after {RUN_TIMEOUT_S:.0f} s")
                    attempt.stop()
                continue
            target, moment = plan[0]
            if not aim(attempt, run_dir, target, moment, rng, times):
                continue  # the attempt ended before the moment: handled at the top
            killed = kill(attempt, run_dir, target, moment, rng, chaos)
            if killed is None:
                continue
            plan.pop(0)
            failures_in_a_row = 0
            chaos.kills.append(killed)
            print(f"kill {len(chaos.kills)}: {target} ({killed.process}, {killed.signal}) aiming at {moment}, "
                  f"{'inside' if killed.in_checkpoint_write else 'outside'} a checkpoint write, after step "
                  f"{killed.at_step}", flush=True)
            if target == "worker":
                outcome = after_worker_kill(attempt, killed, progress)
                if outcome in ("recovered", "finished"):
                    killed.outcome = outcome
                    continue
                if outcome == "hung":
                    chaos.problems.append(f"the run hung after kill {len(chaos.kills)} (a worker): no step and no "
                                          f"exit in {STALL_S:.0f} s (log {attempt.log}):\n{attempt.tail()}")
                    attempt.stop()
            elif target in CHILD_CODE:
                outcome = after_child_kill(attempt, killed, progress)
                if outcome in ("recovered", "replaced", "finished"):
                    killed.outcome = outcome
                    continue
                # a process of user code killed from outside must not stop the run, let alone hang it
                chaos.problems.append(f"the run {'hung' if outcome == 'hung' else 'stopped'} after kill "
                                      f"{len(chaos.kills)} ({target} process) (log {attempt.log}):\n{attempt.tail()}")
                attempt.stop()
            elif target in SIGNALS:
                after_signal(attempt, killed, chaos)
            else:
                attempt.process.wait()
            ended(attempt)
            killed.outcome = "restarted"
            attempt = start(f"after kill {len(chaos.kills)} ({target})")
        if not attempt.running():
            ended(attempt)
    finally:
        for each in started:
            if each.running():
                each.stop()
        progress.stop()
    for each, after in zip(chaos.kills, [*chaos.kills[1:], None]):
        back = progress.first(each.at, "startup_s/total")
        # not measured where the next kill came first (the time would be two kills')
        if each.outcome != "finished" and back is not None and (after is None or back < after.at):
            each.back_to_training_s = back - each.at
    return chaos


# --- the invariants ---


def weights(run_dir: Path, step: int) -> dict[str, Any]:
    from safetensors.torch import load_file

    folder = run_dir / "checkpoints" / f"step_{step}"
    out = {}
    for file in sorted(folder.rglob("*.safetensors")):
        out.update({f"{file.relative_to(folder)}:{k}": v for k, v in load_file(file).items()})
    return out


def check(run_dir: Path, reference: Path, steps: int) -> dict[str, Any]:
    import torch

    from rlgraph.runtime.checkpoint import CHECKPOINTS, Checkpoint, verify

    root = run_dir / CHECKPOINTS
    incomplete = {}
    for folder in sorted(root.glob("step_*")) if root.is_dir() else []:
        match = re.fullmatch(r"step_(\d+)", folder.name)
        if match and (problem := verify(Checkpoint(int(match.group(1)), folder))):
            incomplete[folder.name] = problem
    set_aside = sorted(p.name for p in root.glob("step_*.corrupt*")) if root.is_dir() else []
    leftovers = sorted(n for n in os.listdir(root) if n.startswith(".")) if root.is_dir() else []

    found = metrics_steps(run_dir)
    expected = list(range(steps + 1))
    counts = {s: found.count(s) for s in set(found)}
    lost = [s for s in expected if s not in counts]
    duplicated = sorted(s for s, n in counts.items() if n > 1)
    unexpected = sorted(s for s in counts if s not in expected)

    mine, theirs = weights(run_dir, steps), weights(reference, steps)
    different = sorted(k for k in theirs if k not in mine or not torch.equal(mine[k], theirs[k]))
    scores_differ = _score_differences(run_dir, reference)
    return {
        "checkpoints": sorted(p.name for p in root.glob("step_*")) if root.is_dir() else [],
        "incomplete_checkpoints": incomplete,
        "corrupt_checkpoints_set_aside": set_aside,
        "leftovers": leftovers,
        "metrics_steps": found,
        "lost_lines": lost,
        "duplicated_lines": duplicated,
        "unexpected_lines": unexpected,
        "weights_compared": len(theirs),
        "weights_equal": bool(theirs) and not different and mine.keys() == theirs.keys(),
        "weights_different": different[:10],
        "scores_differ_at_steps": scores_differ,
    }


def _score_differences(run_dir: Path, reference: Path) -> list[int]:
    """Steps whose reward (critic/score/mean) differs from the reference's: the same data and samples give the
    same scores, so a step redone after a kill must score exactly as the uninterrupted one did."""
    def scores(folder: Path) -> dict[int, Any]:
        out = {}
        for line in (folder / "metrics.jsonl").read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            out[record["training/global_step"]] = record.get("critic/score/mean")
        return out

    mine, theirs = scores(run_dir), scores(reference)
    return sorted(s for s in theirs if s in mine and mine[s] != theirs[s])


def holds(checked: dict[str, Any]) -> bool:
    return (not checked["incomplete_checkpoints"] and not checked["corrupt_checkpoints_set_aside"]
            and not checked["lost_lines"] and not checked["duplicated_lines"] and not checked["unexpected_lines"]
            and checked["weights_equal"] and not checked["scores_differ_at_steps"])


# --- the whole thing ---


def reference_run(run_dir: Path, cmd: list[str], log: Path) -> dict[str, float]:
    """The uninterrupted run; what its timings say about when to kill (start-up, a step, a checkpoint write)."""
    attempt = Attempt(cmd, run_dir, log)
    try:
        attempt.process.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if attempt.running():
            attempt.stop()
    if attempt.process.returncode != 0:
        raise SystemExit(f"the reference run failed ({shlex.join(cmd)}):\n{attempt.tail(30)}")
    wall = time.time() - attempt.started
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r["training/global_step"] >= 1]

    def med(key: str, default: float) -> float:
        values = [r[key] for r in trained if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else default

    step_s = med("timing_s/step", 1.0)
    checkpoint_s = med("timing_s/save_checkpoint", 0.2)
    startup_s = max(wall - sum(r.get("timing_s/step", 0) + r.get("timing_s/save_checkpoint", 0) for r in trained)
                    - records[0].get("timing_s/testing", 0), 1.0)
    return {"wall_s": wall, "step_s": step_s, "checkpoint_s": checkpoint_s, "startup_s": startup_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="how many processes to kill (default 20)")
    parser.add_argument("--steps", type=int, default=None, help="training steps (default: 2 x kills + 4, at least 6)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kills' targets and moments")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the runs here (default: a temp folder)")
    parser.add_argument("--output", default=None, help="the result file (default bench/results/chaos.json)")
    parser.add_argument("--spec", default=SPEC, help=f"the spec to run (default {SPEC}; one with an `env` block, "
                        "e.g. specs/grpo_arith_tool.rl, has its environment's processes killed too)")
    args = parser.parse_args(argv)
    if args.kills < 0:
        parser.error("--kills must be 0 or more")
    steps = args.steps or max(2 * args.kills + 4, 6)  # the kills must find a run: a wait for a busy process takes steps
    if steps < 2:
        parser.error("--steps must be 2 or more")
    rng = random.Random(args.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the runs started are stopped too
    max_failures = args.kills + 1 if supports_max_failures() else None
    env = has_env(args.spec)
    sets = overrides(steps, max_failures)
    invoked = shlex.join([".venv/bin/python", "bench/chaos.py", *(argv if argv is not None else sys.argv[1:])])
    clock = time.time()
    load_start = load_average()

    with tempfile.TemporaryDirectory(prefix="rlgraph-chaos-") as tmp:
        work = args.workdir.resolve() if args.workdir else Path(tmp)
        reference, chaotic, logs = work / "reference", work / "chaos", work / "logs"
        if reference.exists() or chaotic.exists():  # they would resume, not run
            parser.error(f"{work} holds the runs of an earlier chaos run: delete it or pass another --workdir")
        logs.mkdir(parents=True, exist_ok=True)
        print(f"reference: {shlex.join(command(reference, sets, args.spec))}", flush=True)
        times = reference_run(reference, command(reference, sets, args.spec), logs / "reference.log")
        print(f"reference: {times['wall_s']:.1f} s (start-up ~{times['startup_s']:.1f} s, step "
              f"{times['step_s']:.2f} s, checkpoint {times['checkpoint_s']:.3f} s)", flush=True)
        chaos_cmd = command(chaotic, sets, args.spec)
        print(f"chaos: {shlex.join(chaos_cmd)}, {args.kills} kill(s)", flush=True)
        clock_chaos = time.time()
        chaos = chaos_run(chaotic, chaos_cmd, args.kills, rng, times, logs, steps, env)
        chaos_wall = time.time() - clock_chaos
        finished = bool(chaos.attempts) and chaos.attempts[-1]["exit"] == 0
        checked = check(chaotic, reference, steps) if finished else None
        recovery_lines = sum(len(re.findall(r"^recovering \(", Path(a["log"]).read_text(errors="replace"), re.M))
                             for a in chaos.attempts if Path(a["log"]).exists())
        # alive now, with how long after their driver's kill
        stragglers = {pid: f"{time.time() - killed_at:.0f} s: {cmd[:120]}"
                      for pid, (start, cmd, killed_at) in chaos.stragglers.items() if alive(pid, start)}
        for pid, (start, _, _) in chaos.stragglers.items():  # ours: started by the killed drivers
            if alive(pid, start):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        attempt_logs = {Path(a["log"]).name: Path(a["log"]).read_text(errors="replace")[-4000:]
                        for a in chaos.attempts if a["exit"] not in (0, None) or chaos.problems}

    kills = chaos.kills
    figures = {
        "kills": len(kills),
        "kills_driver": sum(k.target == "driver" for k in kills),
        "kills_worker": sum(k.target == "worker" for k in kills),
        **{f"kills_{target}": sum(k.target == target for k in kills) for target in TARGETS[2:]},
        "replaced_between_batches": sum(k.outcome == "replaced" for k in kills),
        "signal_exit_s_max": max((k.exit_s for k in kills if k.exit_s is not None), default=None),
        "kills_inside_checkpoint_write": sum(k.in_checkpoint_write for k in kills),
        "kills_outside_checkpoint_write": sum(not k.in_checkpoint_write for k in kills),
        "kills_in_startup": sum(not k.in_training for k in kills),
        "recoveries_automatic": sum(k.outcome == "recovered" for k in kills),
        "restarts": sum(k.outcome == "restarted" for k in kills),
        "recovery_console_lines": recovery_lines,
        "back_to_training_s_recovered": median([k.back_to_training_s for k in kills if k.outcome == "recovered"]),
        "back_to_training_s_restarted": median([k.back_to_training_s for k in kills if k.outcome == "restarted"]),
        "attempts": len(chaos.attempts),
        "finished": finished,
        "corrupt_checkpoints": (len(checked["incomplete_checkpoints"]) + len(checked["corrupt_checkpoints_set_aside"])
                                if checked else None),
        "lost_metric_lines": len(checked["lost_lines"]) if checked else None,
        "duplicated_metric_lines": len(checked["duplicated_lines"]) if checked else None,
        "weights_equal": checked["weights_equal"] if checked else False,
        "checkpoint_leftovers": len(checked["leftovers"]) if checked else None,  # hidden folders at the end
        "stragglers_of_killed_drivers_at_end": len(stragglers),
        "problems": len(chaos.problems),
        "wall_s": time.time() - clock,
        "chaos_wall_s": chaos_wall,
    }
    ok = finished and checked is not None and holds(checked) and not chaos.problems and len(kills) == args.kills
    result = {
        "command": invoked,
        "run_command": shlex.join(command(Path("DIR"), sets, args.spec)),
        "spec": args.spec, "steps": steps, "kills_asked": args.kills, "seed": args.seed,
        "max_failures": max_failures,
        "invariants_hold": ok,
        "figures": figures,
        "reference": times,
        "checks": checked,
        "kill_log": [asdict(k) for k in kills],
        "attempts": [{k: v for k, v in a.items() if k != "log"} | {"log": Path(a["log"]).name}
                     for a in chaos.attempts],
        "problems": chaos.problems,
        "stragglers_at_end": stragglers,
        "failed_attempt_logs": attempt_logs if not ok else {},
        "load_start": load_start, "load_end": load_average(),
        "machine": machine_facts(),
    }
    path = write_result("chaos", result, args.output)
    print(summary(result))
    print(f"wrote {path}")
    return 0 if ok else 1


def seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f} s"


def summary(result: dict[str, Any]) -> str:
    f = result["figures"]
    lines = [
        f"{f['kills']} kills ({_by_target(f)}; "
        f"{f['kills_inside_checkpoint_write']} inside a checkpoint write, {f['kills_outside_checkpoint_write']} outside; "
        f"{f['kills_in_startup']} during start-up)",
        f"{f['recoveries_automatic']} automatic recoveries (training again {seconds(f['back_to_training_s_recovered'])} "
        f"after the kill, median), {f['restarts']} restarts (re-run: {seconds(f['back_to_training_s_restarted'])}), "
        f"{f['attempts']} runs; {f.get('replaced_between_batches', 0)} processes of user code replaced between "
        f"batches; a signalled run exited within {seconds(f.get('signal_exit_s_max'))} (the longest)",
        f"corrupt checkpoints: {f['corrupt_checkpoints']}; lost metric lines: {f['lost_metric_lines']}; "
        f"duplicated: {f['duplicated_metric_lines']}; final weights equal to the reference: {f['weights_equal']}",
        f"wall time {f['wall_s']:.0f} s (chaos run {f['chaos_wall_s']:.0f} s); stragglers of killed drivers at the "
        f"end: {f['stragglers_of_killed_drivers_at_end']}",
        "invariants hold" if result["invariants_hold"] else "INVARIANTS BROKEN",
    ]
    lines += [f"problem: {p}" for p in result["problems"]]
    checks = result["checks"] or {}
    for key in ("incomplete_checkpoints", "corrupt_checkpoints_set_aside", "lost_lines", "duplicated_lines",
                "unexpected_lines", "weights_different", "scores_differ_at_steps"):
        if checks.get(key):
            lines.append(f"{key}: {checks[key]}")
    return "\n".join(lines)


def _by_target(f: dict[str, Any]) -> str:
    return ", ".join(f"{f.get(f'kills_{target}', 0)} {target}" for target in TARGETS if f.get(f"kills_{target}"))


def doc_section(result: dict[str, Any]) -> list[str]:
    """The figures as markdown, for docs/benchmarks.md (run_all.py renders them)."""
    f, checks = result["figures"], result["checks"] or {}
    rows = [
        ("processes killed or signalled", f"{f['kills']}: {_by_target(f)}"),
        ("... inside a checkpoint write / outside", f"{f['kills_inside_checkpoint_write']} / "
                                                    f"{f['kills_outside_checkpoint_write']}"),
        ("... during start-up (before the training loop)", str(f["kills_in_startup"])),
        ("automatic recoveries (`train.max_failures`)", f"{f['recoveries_automatic']}, training again after "
                                                        f"{seconds(f['back_to_training_s_recovered'])} (median)"),
        ("restarts (the same command re-run)", f"{f['restarts']}, training again after "
                                               f"{seconds(f['back_to_training_s_restarted'])} (median)"),
        ("reward/environment processes replaced between batches", str(f.get("replaced_between_batches", 0))),
        ("a signalled run's exit, the longest", seconds(f.get("signal_exit_s_max"))),
        ("hangs, tracebacks, runs stopped for good", str(f["problems"])),
        ("corrupt or incomplete checkpoints", str(f["corrupt_checkpoints"])),
        ("metric lines lost / duplicated", f"{f['lost_metric_lines']} / {f['duplicated_metric_lines']} "
                                           f"(steps 0..{result['steps']})"),
        ("final weights equal to the uninterrupted run's", "yes, bit for bit" if f["weights_equal"] else "**no**"),
        ("wall time", f"{f['wall_s']:.0f} s (the uninterrupted run {result['reference']['wall_s']:.0f} s)"),
    ]
    out = [f"`{result['command']}`: the run `rlgraph run {result['spec']}` ({result['steps']} steps, a checkpoint "
           f"after each) hit {f['kills']} times at random moments: SIGKILL to the driver (then re-run), a worker, a "
           "reward's or an environment's process (the run recovers by itself, or replaces a process killed between "
           "batches), SIGTERM to the process group or Ctrl-C during start-up (the run must exit soon without a "
           "traceback; then re-run), sometimes the moment a checkpoint write begins. Then every checkpoint is verified "
           "against its manifest, metrics.jsonl is read and the last checkpoint's weights are compared with an "
           f"uninterrupted run's. Invariants {'hold' if result['invariants_hold'] else '**broken**'}.", "",
           "| | |", "|---|---:|"]
    out += [f"| {name} | {value} |" for name, value in rows]
    broken = {k: checks[k] for k in ("incomplete_checkpoints", "lost_lines", "duplicated_lines",
                                      "weights_different") if checks.get(k)}
    if broken or result["problems"]:
        out += ["", f"Broken: {json.dumps(broken)[:400]}; problems: {len(result['problems'])}."]
    return out + [""]


if __name__ == "__main__":
    sys.exit(main())
