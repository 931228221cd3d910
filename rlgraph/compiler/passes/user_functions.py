"""Declared transforms and losses can be called as declared: no built-in's name, no argument the runtime passes
itself, and each one used. (Their arity at each call is checked where the call is built; their code only at
pre-flight: `check` never imports it.)"""

from __future__ import annotations

from rlgraph.compiler.builtins import LOSS_ARGUMENTS, POLICY_LOSSES, TRANSFORM_CONTEXT, TRANSFORMS
from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.passes._common import quoted, written_calls, written_flows
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.lang import ast
from rlgraph.lang.program import Decl, Program


def user_functions(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for decl in program.transforms.values():
        out += _shadows(decl, TRANSFORMS, "transform") + _reserved(decl, (*decl.get("inputs", ()), *TRANSFORM_CONTEXT))
        if program.step is not None and not written_calls(program, decl.name):
            example = f"{', '.join(decl.get('inputs', ()))} -> {decl.name} -> {', '.join(decl.get('outputs', ()))}"
            out.append(warning("unused-function", f"transform `{decl.name}` is declared, but the step never calls it",
                               decl.span, f"call it, e.g. `{example}`, or remove it"))
    used = _losses_used(program)
    for decl in program.losses.values():
        out += _shadows(decl, POLICY_LOSSES, "policy loss") + _reserved(decl, LOSS_ARGUMENTS)
        if program.step is not None and decl.name not in used:
            out.append(warning("unused-function", f"loss `{decl.name}` is declared, but no update uses it", decl.span,
                               f"use it: `actor.update(policy_loss = {decl.name})`, or remove it"))
    return out


def _shadows(decl: Decl, builtins, what: str) -> list[Diagnostic]:
    if decl.name not in builtins:
        return []
    return [error("duplicate-name", f"`{decl.name}` is a built-in {what}: a declared {decl.keyword} needs a name of "
                  "its own", decl.span, f"rename it, e.g. `{decl.keyword} my_{decl.name} {{ ... }}`")]


def _reserved(decl: Decl, taken) -> list[Diagnostic]:
    """An argument the function already gets under that name (an input, the mask, the clip range)."""
    return [error("duplicate-name", f"argument `{name}` of {decl.keyword} `{decl.name}` has a name the function "
                  "is already called with", decl.span_of(f"args.{name}"),
                  f"rename it; `{decl.name}` is also called with {quoted(sorted(set(taken)))}")
            for name in (decl.get("args") or {}) if name in taken]


def _losses_used(program: Program) -> set[str]:
    return {kwarg.value.value for flow in written_flows(program) for kwarg in flow.call.kwargs
            if kwarg.key == "policy_loss" and isinstance(kwarg.value, ast.Ident)}
