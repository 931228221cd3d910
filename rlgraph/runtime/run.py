"""`run_plan(plan, run_dir)`: pre-flight, Ray, the processes, the loop, and recovery from a process's death, in
two parts: `prepare_run` (pre-flight, Ray, the resume check, the history record, the run's inputs written) hands
a `Ready` to `train_run` (the processes started, the checkpoint restored, the loop, recovery).

Start-up overlaps what does not wait on each other: pre-flight's quick part (`preflight.check`: support, models,
data rows) runs first, then Ray starts, and the idle worker it starts with its node imports torch and
transformers (cluster.WORKER_IMPORTS, the longest part of the wait) while this process imports the rest of the
runtime and does the rest of pre-flight (`preflight.prepare`). The two parts of this process go one after the
other, not in two threads: ray.init is Python too, and a thread importing torch beside it took half of the
interpreter's lock and slowed Ray's start, with it the worker's (docs/benchmarks.md, start-up). So this module
imports neither torch nor transformers at its top: Ray must not wait for them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.markup import escape

from rlgraph.plan.model import Plan
from rlgraph.runtime.cluster import Cluster, ray_cluster
from rlgraph.runtime.console import RunConsole
from rlgraph.runtime.disk import write_files
from rlgraph.runtime.errors import FailuresSpentError, ProcessDiedError
from rlgraph.runtime.signals import StopRequest

if TYPE_CHECKING:
    from rlgraph.runtime.loop import RunResult
    from rlgraph.runtime.checkpoint import Checkpoint
    from rlgraph.runtime.preflight import Prepared

PLACEMENT_TIMEOUT_ENV = "RLGRAPH_PLACEMENT_TIMEOUT_S"  # seconds to wait for a pool's devices (default 60)


def run_plan(
    plan: Plan,
    run_dir: str | Path,
    address: str | None = None,
    resume: bool = True,
    *,
    console: RunConsole | None = None,
    placement_timeout_s: float | None = None,
    accept_changes: bool = False,
    invocation: dict[str, Any] | None = None,
    inputs: Mapping[str, str] | None = None,
    stop: StopRequest | None = None,
    on_step: Callable[[dict[str, Any]], Any] | None = None,
) -> RunResult:
    """Train `plan`, writing into `run_dir`: `prepare_run`, then `train_run`. Raises a RunError subclass on
    anything a user can fix.

    A resume whose plan differs from its checkpoint's (beyond what only extends or observes the run) stops
    with a PlanChangedError unless `accept_changes`. Every call appends `invocation` (what the user typed,
    `history.invocation`) and how it started to the run's history.jsonl. `inputs` (path in `run_dir` -> text:
    plan.json, the spec's files) are written once the resume check let the run start.

    An existing Ray connection in this process is used as is (and left running); otherwise see
    `rlgraph.runtime.cluster`. With `stop` (installed by the caller, see signals.py) a signal stops the loop
    after the step in progress, with a checkpoint of it (raises signals.Stopped). `on_step` gets each step's
    metrics record; returning signals.STOP from it ends the run after that step, checkpointed (Trainer.fit).
    """
    console = console or RunConsole(enabled=False)
    with contextlib.ExitStack() as cluster_started:  # Ray, from prepare_run to the end of train_run however it ends
        ready = prepare_run(plan, run_dir, cluster_started, address, resume, console=console,
                            accept_changes=accept_changes, invocation=invocation, inputs=inputs, stop=stop)
        return train_run(ready, console=console, placement_timeout_s=placement_timeout_s, stop=stop, on_step=on_step)


@dataclass
class Ready:
    """What `prepare_run` hands `train_run`."""

    plan: Plan  # with its length known (train.epochs: from the data, now loaded)
    run_dir: Path  # absolute: processes write checkpoints here, whatever their working directory
    cluster: Cluster
    prepared: Prepared  # pre-flight's loaded data, rewards, tokenizer, model paths
    resume_from: Checkpoint | None  # the verified checkpoint the run goes on from; None: from the start
    started: float  # time.perf_counter() when the run started: startup_s/total counts from it
    startup: dict[str, float]  # the parts of the time to the first step so far (startup_s/ray, startup_s/preflight)


def prepare_run(
    plan: Plan,
    run_dir: str | Path,
    cluster_started: contextlib.ExitStack,
    address: str | None = None,
    resume: bool = True,
    *,
    console: RunConsole,
    accept_changes: bool = False,
    invocation: dict[str, Any] | None = None,
    inputs: Mapping[str, str] | None = None,
    stop: StopRequest | None = None,
) -> Ready:
    """Everything before the run's processes: pre-flight, Ray (entered into `cluster_started`, which the caller
    keeps open through `train_run`), the resume check and the history record, `inputs` written, and with
    `resume` False the earlier run set aside."""
    import ray  # here, before the pre-flight thread starts: the two threads then import nothing in common

    started = time.perf_counter()
    run_dir = Path(run_dir).resolve()  # processes write checkpoints here, whatever their working directory
    run_dir.mkdir(parents=True, exist_ok=True)
    starting_locally = not (address or os.environ.get("RAY_ADDRESS")) and not (
        "ray" in sys.modules and ray.is_initialized())
    startup: dict[str, float] = {}  # the parts of the time to the first step, for the first record
    # Pre-flight's quick part first (support, models, every data row: the errors users meet most come at once,
    # before Ray); then Ray; then the rest (rewards, tokenizer, tokenized prompts) while Ray's worker imports.
    from rlgraph.runtime.preflight import check, prepare

    phase = _phase_setter(stop)
    phase("checking the run's inputs")
    clock = time.perf_counter()
    checked = check(plan, starting_locally=starting_locally)
    checked_s = time.perf_counter() - clock
    clock = time.perf_counter()
    phase("starting Ray")
    cluster = cluster_started.enter_context(ray_cluster(plan, address))
    startup["startup_s/ray"] = time.perf_counter() - clock
    if stop is not None:
        stop.install()  # ray.init replaced the handlers with its own
        stop.ray_alive = cluster.alive  # the watcher asks it once a deferred stop is pending (signals.py)
        cluster_started.callback(setattr, stop, "ray_alive", None)
    phase("checking the run's inputs")
    clock = time.perf_counter()
    prepared = prepare(plan, checked)  # imports torch and transformers: after ray.init, not before it
    startup["startup_s/preflight"] = checked_s + time.perf_counter() - clock  # its two parts, before and after `ray`
    from rlgraph.runtime import checkpoint as ckpt
    from rlgraph.runtime import history
    from rlgraph.runtime.loop import SAMPLES_FILE, with_run_length
    from rlgraph.runtime.metrics import METRICS_FILE

    for note in prepared.notes:
        console.log(f"[yellow]note[/]: {note}")
    for warning in prepared.warnings:  # in history.jsonl too (record_start)
        console.log(f"[yellow]warning[/]: {escape(warning)}")
    if plan.train.steps is None:  # train.epochs: the steps follow from the data, now that it is loaded
        plan = with_run_length(plan, len(prepared.train))
        per_epoch = plan.train.steps // plan.train.epochs
        console.log(f"train.epochs = {plan.train.epochs}: {len(prepared.train)} prompts // data.batch_size = "
                    f"{plan.data.batch_size} is {per_epoch} step{'s' * (per_epoch != 1)} per epoch (the last short "
                    f"batch dropped), {plan.train.steps} steps")

    ckpt.sweep(run_dir)  # what checkpoint writes and deletions cut short by a crash left
    # verified against its manifest before any process starts: a damaged newest checkpoint falls back to the one before
    resume_from = ckpt.resume_checkpoint(run_dir, warn=lambda message: console.log(
        f"[yellow]warning[/]: {escape(message)}")) if resume else None
    history.record_start(run_dir, plan.to_dict(), resume_from, accept_changes=accept_changes, invocation=invocation,
                         warnings=prepared.warnings,
                         log=lambda message: console.log(escape(message)))
    write_files(run_dir, inputs or {})  # plan.json and the spec: only once the resume check let the run start
    if not resume:  # the earlier run moved aside, not deleted: --no-resume typed by mistake costs nothing
        moved, aside = ckpt.set_aside(run_dir, also=(METRICS_FILE, SAMPLES_FILE))
        if aside is not None:
            console.log(f"starting fresh: the earlier run ({moved} checkpoint(s), its metrics and samples) was "
                        f"moved to {aside}; delete that folder to free its space")
    return Ready(plan, run_dir, cluster, prepared, resume_from, started, startup)


def train_run(
    ready: Ready,
    *,
    console: RunConsole,
    placement_timeout_s: float | None = None,
    stop: StopRequest | None = None,
    on_step: Callable[[dict[str, Any]], Any] | None = None,
) -> RunResult:
    """The run's processes started (lowering), the checkpoint restored, then `Trainer.fit`; nothing to do when
    the checkpoint is at the run's last step. A process that dies once they run is recovered from, up to
    train.max_failures times: every process restarted, going on from the newest checkpoint."""
    from rlgraph.runtime import checkpoint as ckpt
    from rlgraph.runtime.driver import ray_errors
    from rlgraph.runtime.lowering import DEFAULT_PLACEMENT_TIMEOUT_S, Lowered, lower
    from rlgraph.runtime.loop import RunResult, Trainer
    from rlgraph.runtime.metrics import METRICS_FILE, read_metrics
    from rlgraph.runtime.roles import worker_specs

    plan, run_dir, cluster, prepared = ready.plan, ready.run_dir, ready.cluster, ready.prepared
    resume_from, started, startup = ready.resume_from, ready.started, ready.startup
    phase = _phase_setter(stop)
    total = plan.train.steps
    if resume_from is not None and resume_from.step >= total:
        length = f"train.epochs = {plan.train.epochs}" if plan.train.epochs is not None else "train.steps"
        console.log(f"{run_dir} is already trained to step {resume_from.step} ({length}: {total} steps); nothing to "
                    f"do. Raise {length.split(' ')[0]} to go on, or pass --no-resume to start over.")
        return RunResult.of(run_dir, resume_from.step, resume_from.step, time.perf_counter() - started,
                            resume_from.path, read_metrics(run_dir / METRICS_FILE))
    if resume_from is not None:
        console.log(f"resuming from {resume_from.path} (step {resume_from.step})")

    specs = worker_specs(plan, _model_paths(plan, prepared, resume_from))

    console.log(f"ray: {cluster.mode} ({cluster.address}); starting {len(plan.processes())} process(es)")
    timeout_s = placement_timeout_s or float(os.environ.get(PLACEMENT_TIMEOUT_ENV) or DEFAULT_PLACEMENT_TIMEOUT_S)
    recoveries = 0
    while True:
        lowered = Lowered()
        # a process that dies while the run's processes first start would die again: not recovered from;
        # one that dies while a recovery restarts them counts as one more failure
        running = recoveries > 0
        try:
            phase("starting the run's processes")
            with ray_errors(lowered.actor_names):
                lower(plan, specs, lowered, timeout_s=timeout_s)
            running = True
            startup.update({f"startup_s/{part}": seconds for part, seconds in lowered.seconds.items()})
            trainer = Trainer(plan, lowered, specs, prepared, run_dir, console)
            if resume_from is not None:
                clock = time.perf_counter()
                phase("restoring the checkpoint")
                trainer.restore(resume_from)
                startup["startup_s/restore"] = time.perf_counter() - clock
            startup["startup_s/total"] = time.perf_counter() - started
            return trainer.fit(started, startup, stop=stop, on_step=on_step)
        except ProcessDiedError as err:
            if not running or (stop is not None and stop.requested):  # stopping: a signal may have killed it
                raise
            if recoveries >= plan.train.max_failures:
                raise _failures_spent(err, recoveries, plan.train.max_failures, ckpt.latest_checkpoint(run_dir)) from None
            recoveries += 1
            console.stop()
            if stop is not None:  # out of the loop until the restarted one runs: a signal stops at once, as
                stop.deferring = False  # while the run first starts (a wait on a Ray it killed never returns)
            # every process and placement group of the run, the dead one's peers too: the environments'
            # processes live in the rollout's, and go with it
            lowered.shutdown()
            for reward in prepared.rewards.values():  # the rewards' processes (this one's children) start
                reward.close()  # anew at their next batch, as a resumed run's would
            resume_from = ckpt.resume_checkpoint(run_dir, warn=lambda message: console.log(
                f"[yellow]warning[/]: {escape(message)}"))
            where = f"{resume_from.path} (step {resume_from.step})" if resume_from else "the start"
            console.log(f"[yellow]recovering[/] ({recoveries} of train.max_failures = {plan.train.max_failures}): "
                        f"{escape(str(err).splitlines()[0])} Restarting every process (workers, environments, "
                        f"rewards) and going on from {where}.")
            specs = worker_specs(plan, _model_paths(plan, prepared, resume_from))
            started, startup = time.perf_counter(), {"training/recoveries": recoveries}
        finally:
            console.stop()
            if cluster.alive():  # a call to a dead Ray waits 60 s, then aborts (cluster.py)
                lowered.shutdown()


def _phase_setter(stop: StopRequest | None) -> Callable[[str], None]:
    """`phase(what)`: what a signal before the loop interrupted (`rlgraph run` says it, see signals.py)."""
    return (lambda what: setattr(stop, "phase", what)) if stop is not None else (lambda what: None)


def _failures_spent(err: ProcessDiedError, recoveries: int, budget: int, latest: Checkpoint | None) -> FailuresSpentError:
    """The death after the last recovery train.max_failures allows: what died, that the budget is spent, and where a
    resume goes on from (`rlgraph run` prints the command)."""
    where = f"its last complete checkpoint is step {latest.step} ({latest.path})" if latest else "it has no checkpoint yet"
    return FailuresSpentError(
        f"{err} The failure budget is spent (train.max_failures = {budget}; {recoveries} recover"
        f"{'y' if recoveries == 1 else 'ies'} made), so the run stops; {where}. A resume goes on from there with the "
        "budget anew; raise train.max_failures to allow more (a resume takes that change without --accept-changes).",
        died=err.died)


def _model_paths(plan: Plan, prepared: Prepared, resume_from: Checkpoint | None) -> dict[str, str]:
    """Where each role's weights load from: its model, or the trained roles' folders of the checkpoint."""
    from rlgraph.runtime.loop import TRAINED_KINDS

    model_paths = dict(prepared.model_paths)
    if resume_from is not None:
        for role in plan.roles:
            # a trained role the checkpoint lacks (added with --accept-changes) starts from its model
            if role.kind in TRAINED_KINDS and resume_from.model_dir(role.name).is_dir():
                model_paths[role.name] = str(resume_from.model_dir(role.name))
    return model_paths
