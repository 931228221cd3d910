"""`rlgraph plan FILE`: what would run where, memory per device, the step's schedule.

Diagnostics go to standard error in full form, so standard output (or `-o PATH`)
holds only the rendered plan: text (rich), json (the Plan; docs/plan.md), dot or html.
The plan of whatever could be planned is printed even when there are errors;
the exit code is 1 then, else 0.

`--fit` (fit_command) prints, as a diff, the spec changed by the smallest change
that makes an out-of-memory plan fit, and writes it to `-o PATH`.
"""

from __future__ import annotations

import difflib
import sys

from rlgraph.api import compile
from rlgraph.diagnostics import has_errors, render_full
from rlgraph.importers.verl_overrides import is_imported, verl_change
from rlgraph.lang.edit import set_key
from rlgraph.lang.formatter import FormatError, FormatterBug, format_text
from rlgraph.plan.build import plan_step_shape
from rlgraph.plan.memory import fit_test
from rlgraph.plan.memory_advice import verified_changes
from rlgraph.plan.model import Plan
from rlgraph.plan.resolve import models_settings

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
    spec = compile(file, overrides=overrides)
    plan = spec.plan()
    if spec.diagnostics:
        sys.stderr.write(spec.render())
    color = fmt == "text" and output is None and sys.stdout.isatty()
    text = render(plan, fmt, color=color)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 1 if has_errors(spec.diagnostics) else 0


# ---- `rlgraph plan FILE --fit` -----------------------------------------------------
# The smallest change the out-of-memory advice verified (rlgraph/plan/memory_advice.py) is written into the
# spec's text (rlgraph/lang/edit.py), formatted, planned again as the text of the original file (so includes
# and relative paths resolve as they do for it) and shown as a diff. A spec that fits is left alone.

def _as_verl(program, applied) -> str:
    """The fitting changes of a spec `rlgraph import verl` wrote, as overrides of the launch it came from."""
    change = verl_change(program, tuple(edit for c in applied for edit in c.edits))
    lines = ["the same change to the verl launch, as overrides:\n"]
    lines += [f"  {override}\n" for override in change.overrides]
    lines += [f"  (no verl override for {what})\n" for what in change.unsaid]
    return "".join(lines) if change.overrides or change.unsaid else ""


MAX_ROUNDS = 4  # one change per pool that is over; a few pools at most


def fit_command(file: str, output: str | None = None) -> int:
    compilation, plan, diagnostics = _planned(compile(file))
    if _other_errors(diagnostics):
        sys.stderr.write(render_full(diagnostics, compilation.sources))
        sys.stderr.write("--fit changes only what memory needs: fix the errors above first\n")
        return 1
    text = compilation.sources[compilation.path]
    fitted, applied, fixed = text, [], set()
    while _over(plan) and len(applied) < MAX_ROUNDS:
        pool = _over(plan)[0]
        if pool in fixed:  # the estimate said it fits, the written spec does not (an include sets the key later?)
            sys.stderr.write(f"pool `{pool}` is still over with {applied[-1].text} written into the spec: "
                             "no fitting spec was written\n")
            return 1
        fixed.add(pool)
        step = plan_step_shape(compilation, plan)
        models = models_settings(compilation.program)
        changes = verified_changes(compilation.program, pool, fit_test(compilation.program, step, models), step)
        if not changes:
            over = [d for d in diagnostics if d.code in ("out-of-memory", "memory-at-full-length")]
            sys.stderr.write(render_full(over, compilation.sources))
            sys.stderr.write(f"no change that rlgraph knows makes pool `{pool}` fit: no fitting spec was written\n")
            return 1
        for change in changes:  # smallest first; one that the whole compiler accepts
            try:
                candidate = fitted
                for keyword, name, key, value in change.edits:
                    candidate = set_key(candidate, keyword, name, key, value, file)
                candidate = format_text(candidate, file)
                result = _plan_text(candidate, file)
            except (FormatError, FormatterBug, OSError) as exc:
                sys.stderr.write(f"cannot write {change.text} into the spec: {exc}\n")
                return 1
            if not _other_errors(result[2]):
                fitted, (compilation, plan, diagnostics) = candidate, result
                applied.append(change)
                break
            rejected = change, result
        else:
            change, (compilation, _, diagnostics) = rejected
            sys.stderr.write(render_full(diagnostics, compilation.sources))
            sys.stderr.write(f"with {change.text} the spec has the errors above: no fitting spec was written\n")
            return 1
    if _over(plan):
        sys.stderr.write(f"pool `{_over(plan)[0]}` is still over after {len(applied)} changes: "
                         "no fitting spec was written\n")
        return 1
    if not applied:
        sys.stderr.write(f"`{file}` already fits: nothing to change\n")
    else:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(keepends=True), fitted.splitlines(keepends=True),
                                                   fromfile=file, tofile=output or f"{file} (fitted)"))
        sys.stderr.write("".join(f"fits with {change.text}\n" for change in applied))
        if is_imported(text):
            sys.stderr.write(_as_verl(compilation.program, applied))
    if output:
        try:
            with open(output, "w", encoding="utf-8") as f:
                f.write(fitted)
        except OSError as exc:
            sys.stderr.write(f"cannot write `{output}`: {exc.strerror or exc}\n")
            return 1
        if applied:
            sys.stderr.write(f"wrote {output}\n")
    return 0


def _other_errors(diagnostics) -> bool:
    return any(d.is_error and d.code != "out-of-memory" for d in diagnostics)


def _over(plan: Plan) -> list[str]:
    """The pools with a device whose estimate exceeds its memory, in the plan's order."""
    over = {r.pool for r in plan.memory if r.capacity_bytes and r.estimated_bytes > r.capacity_bytes}
    return [p.name for p in plan.pools if p.name in over]


def _plan_text(text: str, file: str):
    """Compile and plan `text` as if it were `file`."""
    return _planned(compile(text=text, name=file))


def _planned(spec):
    return spec.compilation, spec.plan(), spec.diagnostics
