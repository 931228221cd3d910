"""Spec -> checked Program and StepGraph: load, override, validate, build, run every pass, then check the stage
specs it starts from (`path = "run:a.rl"`) in turn: compiling is the compiler's, so no pass imports it back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlgraph.compiler.build import build_graph
from rlgraph.compiler.graph import StepGraph
from rlgraph.contract.stages import stage_spec
from rlgraph.diagnostics import Diagnostic, error, has_errors
from rlgraph.lang.loader import load
from rlgraph.lang.overrides import apply_overrides
from rlgraph.lang.program import InvalidValue, Program
from rlgraph.lang.stages import stage_file
from rlgraph.lang.validate import to_program


@dataclass
class Compilation:
    path: str
    sources: dict[str, str]
    program: Program | None = None
    graph: StepGraph | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.program is not None and not has_errors(self.diagnostics)


def compile_spec(path: str, overrides: list[str] | tuple[str, ...] = (), text: str | None = None) -> Compilation:
    """`text`: the spec's text, standing for the file at `path` (spec.loader.load)."""
    from rlgraph.compiler.passes import PASSES

    loaded = load(path, text)
    result = Compilation(loaded.root, loaded.sources)
    if loaded.diagnostics and any(d.code in ("syntax", "encoding", "io") for d in loaded.diagnostics):
        result.diagnostics = list(loaded.diagnostics)
        return result  # nothing meaningful to check past unreadable text
    apply_overrides(loaded, list(overrides))
    program, problems = to_program(loaded)
    graph, build_problems = build_graph(program)
    result.program, result.graph = program, graph
    result.diagnostics = list(loaded.diagnostics) + problems + build_problems
    for check in PASSES:
        result.diagnostics += run_check(check, program, graph)
    result.diagnostics += _stages_before(program)
    return _dedupe(result)


def run_check(check, *args) -> list[Diagnostic]:
    """A check's diagnostics; none when it reads a value the spec wrote wrongly (InvalidValue): that value was
    reported where it is written, and a check computed on a default would report things that are not so."""
    try:
        return check(*args)
    except InvalidValue:
        return []


def _stages_before(program: Program) -> list[Diagnostic]:
    """An error at each model whose stage spec (`path = "run:a.rl"`) does not check clean: that stage would not
    run, so this one has nothing to start from. The paths pass has read each such spec and marked invalid a path
    whose spec is not there or trains no actor, so a valid one only needs finding."""
    out = []
    for model in program.models.values():
        path = model.get("path") if model.is_set("path") and model.is_valid("path") else None
        spec = stage_spec(path) if isinstance(path, str) else None
        file = stage_file(path, Path(program.path).parent) if spec is not None else None
        errors = _stage_errors(str(file)) if file is not None else 0
        if errors:
            out.append(error("model-path", f"model `{model.name}`: the stage before, `{spec}`, does not check clean "
                             f"({errors} error{'s' * (errors != 1)})", model.span_of("path"),
                             f"`rlgraph check {file}` shows them", label="its stage has errors"))
    return out


_CHECKING: list[str] = []  # the stage specs being checked now: a stage that names itself (or a loop) ends here


def _stage_errors(path: str) -> int:
    """The errors `check` finds in the stage spec at `path` (0 for a loop of stages, reported where it closes)."""
    resolved = str(Path(path).resolve())
    if resolved in _CHECKING:
        return 0
    _CHECKING.append(resolved)
    try:
        return sum(d.severity == "error" for d in compile_spec(path).diagnostics)
    finally:
        _CHECKING.pop()


def _dedupe(result: Compilation) -> Compilation:
    seen, unique = set(), []
    for d in result.diagnostics:
        key = (d.code, d.message, d.span)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    result.diagnostics = unique
    return result
