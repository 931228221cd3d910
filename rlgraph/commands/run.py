"""`rlgraph run FILE`: compile, plan, write the plan and the spec into the run directory, train.

Exit codes: 0 trained, 1 the spec has errors or the run failed for a reason the message gives
(no traceback: every such failure is a RunError) or another run holds the run directory, 143 stopped by
SIGTERM, 130 by Ctrl-C. SIGTERM and a first Ctrl-C finish the step in progress and checkpoint it; a second
Ctrl-C stops at once; a signal before the first step (compiling, pre-flight, starting Ray) stops at once too,
in one line saying what it interrupted. Either way the last line says how to resume.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from rlgraph.api import RAY_LOG, cannot_run, compile, default_run_dir, run_inputs, train

EXIT_OK, EXIT_ERRORS, EXIT_INTERRUPTED = 0, 1, 130


def run_command(file: str, overrides: list[str], output: str | None, address: str | None, resume: bool = True,
                accept_changes: bool = False, stop=None) -> int:
    """`stop`: the StopRequest that owns SIGTERM and SIGINT (cli.main installs it first thing)."""
    from rlgraph.runtime.signals import StopRequest

    stop = stop or StopRequest()
    console = Console()
    with stop.installed():
        run_dir = Path(output) if output else default_run_dir(file)

        def stopped_at_once() -> None:  # the main path's last line, and the signal watcher's (signals.py)
            where = stop.run_dir if stop.run_dir is not None and stop.run_dir.is_dir() else run_dir
            console.print(stopped_line(stop, where, escape(resume_command(file, overrides, where, address)),
                                       escape(stop.cause)), highlight=False, soft_wrap=True)

        stop.last_words = stopped_at_once
        try:
            return _run_command(console, file, overrides, output, address, resume, accept_changes, stop)
        except KeyboardInterrupt:
            if not stop.received:  # not a signal of ours (e.g. a test's own KeyboardInterrupt)
                raise
            stop.say_stopped()
            return stop.exit_code


def stopped_line(stop, run_dir: Path, again: str, cause: str = "") -> str:
    """What `rlgraph run` says last when a signal stopped it without a checkpoint of the step in progress: what
    the signal interrupted, the last complete checkpoint, and the command that goes on."""
    from rlgraph.runtime.checkpoint import latest_checkpoint

    latest = latest_checkpoint(run_dir) if run_dir.is_dir() else None
    if stop.deferring:  # in the loop: a second Ctrl-C, or the signal reached Ray too (`cause`)
        how = "at once" if not cause else f"by {stop.first_name}{cause}"
        if latest is None:
            return f"[yellow]stopped[/] {how}; there is no checkpoint yet. Start again with: {again}"
        return (f"[yellow]stopped[/] {how}; the last complete checkpoint is step {latest.step} "
                f"({escape(str(latest.path))}). Resume with: {again}")
    how = f"[yellow]stopped[/] by {stop.first_name} while {stop.phase}{cause}"
    if latest is None:
        return f"{how}; nothing was trained. Start again with: {again}"
    return (f"{how}; nothing new was trained, the last complete checkpoint is step {latest.step} "
            f"({escape(str(latest.path))}). Resume with: {again}")


def _run_command(console: Console, file: str, overrides: list[str], output: str | None, address: str | None,
                 resume: bool, accept_changes: bool, stop) -> int:
    from rlgraph.runtime.errors import RunError
    from rlgraph.runtime.lock import RunDirLock

    plan = None
    if file.endswith(".json"):  # a saved plan (a run directory's plan.json): runs as it is, no compiler
        plan = load_plan(file, overrides)
        if plan is None:
            return EXIT_ERRORS
        run_dir = Path(output) if output else default_run_dir(plan.spec)
    else:
        run_dir = Path(output) if output else default_run_dir(file)
    # One run per directory, locked before anything is written into it and before Ray starts. An existing
    # directory is locked before compiling too, so a second run into a busy one exits at once; a new one only
    # once the spec compiled, so a spec with errors leaves nothing behind.
    lock = RunDirLock(run_dir)
    try:
        if run_dir.is_dir():
            lock.acquire()
        return _compile_and_train(console, file, overrides, plan, run_dir, address, resume, accept_changes, lock, stop)
    except RunError as err:  # the directory is another run's, or cannot be created
        console.print(f"[bold red]error[/]: {escape(str(err))}", highlight=False, soft_wrap=True)
        return EXIT_ERRORS
    finally:
        lock.release()


def _compile_and_train(console: Console, file: str, overrides: list[str], plan, run_dir: Path, address: str | None,
                       resume: bool, accept_changes: bool, lock, stop) -> int:
    stop.run_dir = run_dir
    stop.phase = "compiling the spec"
    if plan is not None:
        inputs = run_inputs(plan, run_dir, plan_file=file)
    else:
        spec = compile(file, overrides=overrides)
        plan = spec.plan()
        if spec.diagnostics:
            sys.stdout.write(spec.render())
        if refused := cannot_run(spec):
            sys.stdout.write(refused)
            return EXIT_ERRORS
        inputs = run_inputs(spec, run_dir)
    lock.acquire()
    return _train(console, file, overrides, plan, run_dir, address, resume, accept_changes, inputs, stop)


def _train(console: Console, file: str, overrides: list[str], plan, run_dir: Path, address: str | None, resume: bool,
           accept_changes: bool, inputs: dict[str, str], stop) -> int:
    # Only now the heavy part: ray loads here, torch and transformers in run_plan while Ray starts.
    from rlgraph.runtime import RunError, history
    from rlgraph.runtime.console import RunConsole
    from rlgraph.runtime.signals import NAMES, Stopped

    stop.phase = "loading the runtime"
    run_console = RunConsole(console, ray_log=run_dir / RAY_LOG)
    console.print(f"[bold]rlgraph run[/] {escape(file)} -> {escape(str(run_dir))}", highlight=False)
    stop.log = run_console.log
    again = escape(resume_command(file, overrides, run_dir, address))
    try:
        train(plan, run_dir, inputs, invocation=history.invocation(file, overrides), console=run_console,
              stop=stop, address=address, resume=resume, accept_changes=accept_changes)
    except RunError as err:
        run_console.stop()
        if stop.received:  # it failed while stopping: the signal reached the run's Ray processes too
            died = getattr(err, "died", str(err))  # a process the signal ended: not a guess at memory
            cause = f" (it reached the run's Ray processes too: {escape(died.splitlines()[0])})"
            stop.say_stopped(lambda: console.print(stopped_line(stop, run_dir, again, cause), highlight=False,
                                                   soft_wrap=True))
            return stop.exit_code
        resume = f" Resume with: {again}" if err.resumable else ""
        console.print(f"[bold red]error[/]: {escape(str(err))}{resume}", highlight=False, soft_wrap=True)
        return EXIT_ERRORS
    except Stopped as stopped:
        run_console.stop()
        if stopped.checkpoint is None:
            line = (f"[yellow]stopped[/] by {NAMES[stopped.signum]} before the first step; nothing was trained. "
                    f"Start again with: {again}")
        else:
            line = (f"[yellow]stopped[/] by {NAMES[stopped.signum]} after step {stopped.step}, checkpointed in "
                    f"{escape(str(stopped.checkpoint))}. Resume with: {again}")
        stop.say_stopped(lambda: console.print(line, highlight=False, soft_wrap=True))
        return stopped.exit_code
    except KeyboardInterrupt:  # a second Ctrl-C, or a signal before the loop: run_command says what it stopped
        run_console.stop()
        raise
    return EXIT_OK


def resume_command(file: str, overrides: list[str], run_dir: Path, address: str | None) -> str:
    """The command that goes on with this run: same file and overrides (a resume compares its plan with the
    checkpoint's), the run directory spelt out, no --no-resume."""
    argv = ["rlgraph", "run", file, *(arg for o in overrides for arg in ("-s", o)), "--output", str(run_dir)]
    return shlex.join(argv + (["--address", address] if address else []))


def load_plan(file: str, overrides: list[str]):
    """A Plan read from `file` (plan.json), or None after printing why it cannot run."""
    from rlgraph.contract.settings import SettingsError
    from rlgraph.plan.model import Plan

    if overrides:
        sys.stdout.write(f"error: {file} is a saved plan: it runs as it is, without -s overrides; "
                         "give the spec (DIR/spec/<file>.rl) to change it\n")
        return None
    try:
        plan = Plan.from_json(Path(file).read_text())
    except OSError as err:
        sys.stdout.write(f"error: cannot read {file}: {err.strerror}\n")
        return None
    except (ValueError, KeyError, TypeError, SettingsError) as err:
        sys.stdout.write(f"error: {file} is not a plan this rlgraph can run: {err}. Plan it again from its spec "
                         "(`rlgraph run DIR/spec/<file>.rl`).\n")
        return None
    if not plan.ok:
        sys.stdout.write(f"error: {file} is the plan of a spec with errors; nothing was started\n")
        return None
    return plan
