"""The golden-file runner that tests/compiler (the graph passes) and tests/plan (the plan's checks) share.

Each `golden/*.rl` marks its expected diagnostics inline (`# E: code` for an error, `# W: code` for a
warning, on the offending line) and `golden/*.out` holds the full rendered output. Regenerate the .out files
with RLGRAPH_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable

from rlgraph.diagnostics import render_full

MARK = re.compile(r"#\s*([EW]):\s*([a-z][a-z-]*)")


def golden_cases(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.rl"))


def expected_marks(text: str) -> list[tuple[str, str, int]]:
    return sorted((severity, code, line) for line, source in enumerate(text.splitlines(), 1)
                  for severity, code in MARK.findall(source))


def marked_codes(cases: Iterable[Path]) -> set[str]:
    return {code for path in cases for _, code, _ in expected_marks(path.read_text())}


def assert_golden(path: Path, diagnostics: list[Any], sources: dict[str, str]) -> None:
    """The diagnostics are the ones marked in `path`, and render as its .out file."""
    got = sorted(("E" if d.is_error else "W", d.code, d.span.line) for d in diagnostics)
    assert got == expected_marks(path.read_text())
    rendered = render_full(diagnostics, sources)
    out = path.with_suffix(".out")
    if os.environ.get("RLGRAPH_UPDATE_GOLDEN"):
        out.write_text(rendered)
    assert out.exists(), f"{out.name} is missing: run with RLGRAPH_UPDATE_GOLDEN=1"
    assert rendered == out.read_text()


def stray_out_files(folder: Path) -> set[str]:
    """.out files without their spec."""
    return {p.stem for p in folder.glob("*.out")} - {p.stem for p in folder.glob("*.rl")}
