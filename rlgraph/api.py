"""The Python API: `rlgraph check`, `plan`, `run` and `export` as calls, for a notebook or a sweep script.

    import rlgraph
    spec = rlgraph.compile("specs/grpo_arith.rl", overrides={"train.steps": 5})  # or compile(text=..., name=...)
    spec.diagnostics   # [Diagnostic]: what `rlgraph check` prints; spec.ok is False on any error
    plan = spec.plan() # the Plan `rlgraph plan` shows
    result = rlgraph.run(spec, "runs/x", on_step=lambda record: ...)   # a RunResult; return rlgraph.STOP to stop
    model, tokenizer = rlgraph.load("runs/x")

These are the commands' own functions, not a second path: `rlgraph check | plan | run` (rlgraph/commands/)
compile with `compile`, and `rlgraph run` checks with `cannot_run`, says what the run directory gets
with `run_inputs` and trains with `train`, so a spec compiles, plans and runs the same way from either.
Importing this module loads neither torch nor Ray: `run` and `load` import them when called. docs/api.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Callable, Union

from rlgraph.runtime.signals import STOP

# The compiler, the plan and the runtime load when a call needs them: `rlgraph run` imports this module before
# it checks the run directory's lock, and a run refused for a busy directory should exit at once.
if TYPE_CHECKING:
    from rlgraph.compiler import Compilation
    from rlgraph.diagnostics import Diagnostic
    from rlgraph.plan.model import Plan
    from rlgraph.runtime.console import RunConsole
    from rlgraph.runtime.loop import RunResult
    from rlgraph.runtime.signals import StopRequest

__all__ = ["STOP", "Spec", "SpecError", "cannot_run", "compile", "default_run_dir", "load",
           "override_args", "run", "run_inputs", "train"]

Overrides = Union[Mapping[str, Any], Iterable[str], None]
RAY_LOG = "ray.log"  # Ray's own warnings, kept off the progress bar
TEXT_NAME = "spec.rl"  # the file a spec given as text stands for, when it is not named


class SpecError(ValueError):
    """A spec (or plan) that cannot run; the message holds its diagnostics rendered as `rlgraph check` shows them."""

    def __init__(self, message: str, diagnostics: list[Diagnostic]) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics


# ---- compile and plan ------------------------------------------------------------------------------


def override_args(overrides: Overrides) -> list[str]:
    """The `-s KEY=VALUE` strings of `overrides`: a mapping's values are written as a spec writes them
    ({"train.steps": 5, "main.memory": "80GiB", "data.train": "my.parquet"}); strings pass as they are."""
    from rlgraph.lang.edit import value_text

    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={value_text(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise TypeError(f"overrides: give a mapping or a list of KEY=VALUE strings, not the string {overrides!r}")
    return [str(o) for o in overrides]


@dataclass
class Spec:
    """A compiled and planned spec: every diagnostic `rlgraph check` reports and the Plan `rlgraph plan` shows."""

    compilation: Compilation
    overrides: list[str]  # as `-s` strings
    diagnostics: list[Diagnostic]  # the compiler's, then placement's and memory's, in file order
    _plan: Plan

    @property
    def path(self) -> str:
        return self.compilation.path

    @property
    def sources(self) -> dict[str, str]:
        """The text of every file read (includes too) and of each override, by the name diagnostics use."""
        return self.compilation.sources

    @property
    def ok(self) -> bool:
        return self.compilation.ok and not any(d.is_error for d in self.diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    def plan(self) -> Plan:
        """The Plan (docs/plan.md); of whatever could be planned when the spec has errors (plan.ok is False)."""
        return self._plan

    def render(self, fmt: str = "full") -> str:
        """The diagnostics as `rlgraph check --format` prints them: full, concise or json."""
        from rlgraph.diagnostics import render

        return render(self.diagnostics, self.sources, fmt)

    def raise_for_errors(self) -> Spec:
        """This spec, or a SpecError with its diagnostics when it has errors."""
        if not self.ok:
            raise SpecError(self.render() + _errors_line(self.errors, " in the spec"), self.errors)
        return self


def compile(path: str | Path | None = None, *, text: str | None = None, name: str | None = None,
            overrides: Overrides = None) -> Spec:
    """Compile and plan a spec file, or `text` standing for the file `name` (default spec.rl in the working
    directory: includes and data paths resolve beside it). A spec with errors raises nothing: see `.ok`,
    `.diagnostics`, `.raise_for_errors()`."""
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import plan_spec

    if (path is None) == (text is None):
        raise TypeError("compile: give a spec file or text=, one of them")
    if path is not None and name is not None:
        raise TypeError("compile: name= names a spec given as text; a file is named by its path")
    args = override_args(overrides)
    compilation = compile_spec(str(path if path is not None else name or TEXT_NAME), args, text=text)
    plan, diagnostics = plan_spec(compilation)
    return Spec(compilation, args, diagnostics, plan)


# ---- run --------------------------------------------------------------------------------------------


def default_run_dir(file: str) -> Path:
    return Path("runs") / Path(file).stem


def cannot_run(spec: Spec) -> str:
    """Why `run` does not start `spec`, as the line that ends its report; empty when it starts. Warnings
    `check` gives (the spec may be for another runtime) refuse a run here (runtime_support.refusal)."""
    from rlgraph.compiler.passes.runtime_support import refusal

    if not spec.ok:
        return _errors_line(spec.errors, "; nothing was started")
    return refusal(spec.diagnostics)


def run_inputs(target: Spec | Plan, run_dir: Path, plan_file: str | None = None) -> dict[str, str]:
    """What a run writes into its directory once its resume check let it start (`run_plan`'s `inputs`: path in
    the directory -> text): plan.json, and for a spec its source files and overrides.txt. `plan_file`: the saved
    plan a Plan was read from, not written over itself."""
    if isinstance(target, Spec):
        return spec_inputs(target.plan().to_json(), target.sources, target.path, target.overrides)
    if plan_file is not None and (run_dir / "plan.json").exists() and \
            (run_dir / "plan.json").resolve() == Path(plan_file).resolve():
        return {}
    return {"plan.json": target.to_json()}


def train(plan: Plan, run_dir: Path, inputs: Mapping[str, str], *, invocation: dict[str, Any],
          console: RunConsole, stop: StopRequest, address: str | None = None, resume: bool = True,
          accept_changes: bool = False, on_step: Callable[[dict[str, Any]], Any] | None = None) -> RunResult:
    """`run_plan` as `run` and `rlgraph run` both call it: Ray's messages go to DIR/ray.log, SIGTERM and a first
    Ctrl-C stop after the step in progress with a checkpoint (raise signals.Stopped). The caller holds
    the run directory's lock."""
    from rlgraph.runtime import run_plan

    with stop.installed(), console.ray_logs_to_file():
        return run_plan(plan, run_dir, address, resume, console=console, accept_changes=accept_changes,
                        invocation=invocation, inputs=inputs, stop=stop, on_step=on_step)


def run(target: Spec | Plan, run_dir: str | Path | None = None, *, address: str | None = None, resume: bool = True,
        accept_changes: bool = False, on_step: Callable[[dict[str, Any]], Any] | None = None,
        quiet: bool = False) -> RunResult:
    """Train a compiled spec (as `rlgraph run FILE`: the run directory gets plan.json, the spec's files and
    overrides.txt) or a Plan (as `rlgraph run plan.json`). `run_dir` defaults to runs/<spec name>; a directory
    with checkpoints is resumed from its newest unless `resume=False`.

    `on_step(record)` gets each step's metrics (the line metrics.jsonl gets, before the step's checkpoint);
    returning `rlgraph.STOP` ends the run after that step with a checkpoint of it, and `run` returns as for a
    finished run (`result.steps` is that step). Raises SpecError for a spec that cannot run, a RunError
    (rlgraph.runtime) for what stops a run, signals.Stopped on SIGTERM or Ctrl-C (after the step, checkpointed)."""
    from rich.console import Console

    from rlgraph.plan.model import Plan
    from rlgraph.runtime import history
    from rlgraph.runtime.console import RunConsole
    from rlgraph.runtime.lock import RunDirLock
    from rlgraph.runtime.signals import StopRequest

    if isinstance(target, Spec):
        if why := cannot_run(target):
            raise SpecError(target.render() + why, target.diagnostics)
        plan, overrides = target.plan(), target.overrides
    elif isinstance(target, Plan):
        if not target.ok:
            raise SpecError(f"the plan of {target.spec} has errors; nothing was started", [])
        plan, overrides = target, []
    else:
        raise TypeError(f"run: give a Spec (rlgraph.compile) or a Plan, not {type(target).__name__}")
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(plan.spec)
    console = RunConsole(Console(), enabled=not quiet, ray_log=run_dir / RAY_LOG)
    with RunDirLock(run_dir):
        return train(plan, run_dir, run_inputs(target, run_dir), invocation=history.invocation(plan.spec, overrides),
                     console=console, stop=StopRequest(console.log), address=address, resume=resume,
                     accept_changes=accept_changes, on_step=on_step)


def spec_inputs(plan_json: str, sources: dict[str, str], root: str, overrides: list[str]) -> dict[str, str]:
    """plan.json, the spec's source files under spec/ (includes keep their place next to the root file) and
    overrides.txt: `rlgraph run DIR/spec/<file> -s ...` with those overrides plans the same run."""
    files = {"plan.json": plan_json}
    base = PurePath(root).parent
    for name, text in sources.items():
        if name.startswith("<"):  # an override's pseudo-source
            continue
        try:
            relative = PurePath(name).relative_to(base)
        except ValueError:
            relative = PurePath(PurePath(name).name)
        if ".." in relative.parts or relative.is_absolute():
            relative = PurePath(relative.name)
        files[str(PurePath("spec") / relative)] = text
    files["overrides.txt"] = "".join(f"{o}\n" for o in overrides)
    return files


def _errors_line(errors: list[Diagnostic], where: str) -> str:
    return f"Found {len(errors)} error{'s' * (len(errors) != 1)}{where}.\n"


# ---- the trained model ------------------------------------------------------------------------------


def load(source: str | Path, *, role: str | None = None, base: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) of a run's trained policy, as `rlgraph export` writes it: `source` is a run directory
    (its newest checkpoint), a checkpoint or a role's folder in one; `role` defaults to the actor. LoRA adapters
    come merged into their base (`base`: that model's folder, where the one their config names has moved).
    Raises runtime.export.ExportError when there is nothing to load."""
    from rlgraph.runtime.export import load_model, role_folder

    folder, _ = role_folder(Path(source), role)
    return load_model(folder, base=base)
