"""Spec -> checked Program and StepGraph: load, override, validate, build, run every pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlgraph.compiler.build import build_graph
from rlgraph.compiler.graph import StepGraph
from rlgraph.diagnostics import Diagnostic, has_errors
from rlgraph.spec.loader import load
from rlgraph.spec.overrides import apply_overrides
from rlgraph.spec.program import InvalidValue, Program
from rlgraph.spec.validate import to_program


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
    return _dedupe(result)


def run_check(check, *args) -> list[Diagnostic]:
    """A check's diagnostics; none when it reads a value the spec wrote wrongly (InvalidValue): that value was
    reported where it is written, and a check computed on a default would report things that are not so."""
    try:
        return check(*args)
    except InvalidValue:
        return []


def _dedupe(result: Compilation) -> Compilation:
    seen, unique = set(), []
    for d in result.diagnostics:
        key = (d.code, d.message, d.span)
        if key not in seen:
            seen.add(key)
            unique.append(d)
    result.diagnostics = unique
    return result
