"""LLM judges (`role NAME { kind = judge ... }`): a template that renders, a parser that exists.

The template is compiled here, as the worker will compile it (rlgraph/contract/judge.py): a syntax error, or a
field a sample does not have (`{{ answer }}` for `{{ response }}`), is an error at the template; in a template
file, at its line in that file. A parser is a built-in one or a function name; the function itself is imported
when the run starts (pre-flight), as a reward's is. A template with an error is marked invalid: planning does
not read it.
"""

from __future__ import annotations

from pathlib import Path

from rlgraph.compiler.graph import StepGraph
from rlgraph.contract.judge import (TEMPLATE_FIELDS, TemplateProblem, compile_template, is_template_file,
                                    parser_problem, template_text)
from rlgraph.diagnostics import Diagnostic, Span, error
from rlgraph.lang.program import Decl, Program

_FIELDS = ", ".join(f"{{{{ {f} }}}}" for f in TEMPLATE_FIELDS)
_EXAMPLE = ("e.g. \"Question: {{ prompt }}\\nAnswer: {{ response }}\\nIs the answer right? Say yes or no.\"")
_PARSERS = ('use parser = "yes_no", "tag:score" (the number in <score>...</score>), or a function '
            '"my_parsers.py:parse" taking (verdict, prompt, response, ground_truth)')


def judges(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for role in program.roles.values():
        if role.kind != "judge":
            continue
        if role.is_valid("template") and role.get("template") is not None:
            problems = _template(program, role)
            if problems:
                role.mark_invalid("template")
            out += problems
        if role.is_valid("parser") and (problem := parser_problem(role["parser"])) is not None:
            out.append(error("judge-parser", f"judge `{role.name}`: {problem}", role.span_of("parser"), _PARSERS))
            role.mark_invalid("parser")
    return out


def _template(program: Program, role: Decl) -> list[Diagnostic]:
    written = role["template"]
    span = role.span_of("template")
    base = Path(program.path).parent
    try:
        text = template_text(written, base)
    except OSError as err:
        return [error("judge-template", f"judge `{role.name}`: template file `{written}` cannot be read "
                      f"({err.strerror or err})", span, f"a template file is read from the spec's folder ({base.resolve()}); "
                      "or write the template itself in the string")]
    try:
        compile_template(text)
    except TemplateProblem as problem:
        help = f"a template reads {_FIELDS}, in jinja2's syntax: {_EXAMPLE}"
        if not is_template_file(written):
            line = f" (line {problem.line} of the template)" if "\n" in text else ""
            return [error("judge-template", f"judge `{role.name}`: {problem}{line}", span, help)]
        # the error sits in the template's own file, at its line: its text joins the sources the
        # diagnostics quote, so the line is shown as a spec's is
        path = str(Path(written) if Path(written).is_absolute() else base / written)
        program.sources.setdefault(path, text)
        row = text.splitlines()[problem.line - 1] if problem.line <= len(text.splitlines()) else ""
        where = Span(path, problem.line, 1, problem.line, max(len(row), 1) + 1)
        return [error("judge-template", f"judge `{role.name}`: {problem}", where, help,
                      notes=[("the template named here", span)])]
    return []
