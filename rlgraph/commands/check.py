"""`rlgraph check FILE...`: every static check, compiler-style diagnostics, an exit code."""

from __future__ import annotations

import json
import sys

from rlgraph.api import compile
from rlgraph.diagnostics import has_errors


def check_command(files: list[str], overrides: list[str], fmt: str) -> int:
    diagnostics = []
    for path in files:
        spec = compile(path, overrides=overrides)  # planned too: placement and memory are checked while planning
        diagnostics += spec.diagnostics
        if fmt in ("concise", "full"):
            sys.stdout.write(spec.render(fmt))
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
