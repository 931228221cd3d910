"""`rlgraph check FILE...`: every static check, compiler-style diagnostics, an exit code."""

from __future__ import annotations

import json
import sys

from rlgraph.compiler import compile_spec
from rlgraph.diagnostics import has_errors, render_concise, render_full
from rlgraph.plan.build import plan_spec


def check_command(files: list[str], overrides: list[str], fmt: str) -> int:
    diagnostics = []
    for path in files:
        result = compile_spec(path, overrides)
        # Placement and memory are checked while planning; `check` reports them too.
        _, found = plan_spec(result)
        diagnostics += found
        if fmt == "concise":
            sys.stdout.write(render_concise(found))
        elif fmt == "full":
            sys.stdout.write(render_full(found, result.sources))
    if fmt == "json":
        sys.stdout.write(json.dumps([d.to_json() for d in diagnostics], indent=2) + "\n")
    elif fmt == "full":
        errors = sum(d.is_error for d in diagnostics)
        warnings = sum(d.severity == "warning" for d in diagnostics)  # notes (facts about the plan) are not counted
        if errors or warnings:
            sys.stdout.write(f"Found {errors} error{'s' * (errors != 1)} and "
                             f"{warnings} warning{'s' * (warnings != 1)} in {len(files)} file{'s' * (len(files) != 1)}.\n")
        else:
            sys.stdout.write(f"All checks passed ({len(files)} file{'s' * (len(files) != 1)}).\n")
    return 1 if has_errors(diagnostics) else 0
