"""`rlgraph plan FILE`: what would run where, memory per device, the step's schedule.

Diagnostics go to standard error in full form, so standard output (or `-o PATH`)
holds only the rendered plan: text (rich), json (the Plan; docs/plan.md), dot or html.
The plan of whatever could be planned is printed even when there are errors;
the exit code is 1 then, else 0.
"""

from __future__ import annotations

import sys

from rlgraph.compiler import compile_spec
from rlgraph.diagnostics import has_errors, render_full
from rlgraph.plan.build import plan_spec
from rlgraph.plan.model import Plan

FORMATS = ("text", "json", "dot", "html")


def render(plan: Plan, fmt: str, *, color: bool = False) -> str:
    if fmt == "json":
        return plan.to_json()
    if fmt == "dot":
        from rlgraph.plan.dot import render_dot
        return render_dot(plan)
    if fmt == "html":
        from rlgraph.plan.html import render_html
        return render_html(plan)
    from rlgraph.plan.text import render_text
    return render_text(plan, color=color, width=None if color else 120)


def plan_command(file: str, overrides: list[str], fmt: str = "text", output: str | None = None) -> int:
    if fmt not in FORMATS:
        raise ValueError(f"unknown plan format {fmt!r}; expected one of {', '.join(FORMATS)}")
    compilation = compile_spec(file, overrides)
    plan, diagnostics = plan_spec(compilation)
    if diagnostics:
        sys.stderr.write(render_full(diagnostics, compilation.sources))
    color = fmt == "text" and output is None and sys.stdout.isatty()
    text = render(plan, fmt, color=color)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 1 if has_errors(diagnostics) else 0
