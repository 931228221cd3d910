"""LLM judges (`role NAME { kind = judge ... }`): a template that renders, a parser that exists.

The template is compiled here, as the worker will compile it (rlgraph/contract/judge.py): a syntax error, or a
field a sample does not have (`{{ answer }}` for `{{ response }}`), is an error at the template, its line
within the template said. A parser is a built-in one or a function name; the function itself is imported
when the run starts (pre-flight), as a reward's is.
"""

from __future__ import annotations

from pathlib import Path

from rlgraph.compiler.graph import StepGraph
from rlgraph.contract.judge import (TEMPLATE_FIELDS, TemplateProblem, compile_template, is_template_file,
                                    parser_problem, template_text)
from rlgraph.diagnostics import Diagnostic, Span, error
from rlgraph.spec.program import Decl, Program

_FIELDS = ", ".join(f"{{{{ {f} }}}}" for f in TEMPLATE_FIELDS)


def judges(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for role in program.roles.values():
        if role.kind != "judge":
            continue
        if role.is_valid("template") and role.get("template") is not None:
            out += _template(program, role)
        if role.is_valid("parser") and (problem := parser_problem(role["parser"])) is not None:
            out.append(error("judge-parser", f"judge `{role.name}`: {problem}", role.span_of("parser"),
                             'use parser = "yes_no", "tag:score" (the number in <score>...</score>), or a function '
                             '"my_parsers.py:parse" taking (verdict, prompt, response, ground_truth)'))
    return out


def _template(program: Program, role: Decl) -> list[Diagnostic]:
    written = role["template"]
    span = role.span_of("template")
    base = Path(program.path).parent
    try:
        text = template_text(written, base)
    except OSError as err:
        return [error("judge-template", f"judge `{role.name}`: template file `{written}` cannot be read "
                      f"({err.strerror or err})", span, f"a template file is read from the spec's folder ({base}); "
                      "or write the template itself in the string")]
    try:
        compile_template(text)
    except TemplateProblem as problem:
        if is_template_file(written):  # the error sits in the template's own file, at its line
            path = Path(written) if Path(written).is_absolute() else base / written
            where = Span.point(str(path), problem.line)
            notes = [("the template named here", span)]
        else:
            where, notes = span, []
        line = f" (line {problem.line} of the template)" if not is_template_file(written) and "\n" in text else ""
        return [error("judge-template", f"judge `{role.name}`: {problem}{line}", where,
                      f"a template reads {_FIELDS}, in jinja2's syntax: e.g. \"{{{{ prompt }}}}{{{{ response }}}} "
                      "Is this right? Answer yes or no.\"", notes=notes)]
    return []
