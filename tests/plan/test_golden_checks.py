"""Golden files for the plan's checks (rlgraph/plan/checks.py): as tests/compiler/golden, each
`golden/*.rl` marks its expected diagnostics inline (`# E: code`, `# W: code`) and `golden/*.out` holds
the rendered output, but the spec goes through `plan_spec`, which reads config.json and the placements.
Regenerate the .out files with RLGRAPH_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.diagnostics import render_full
from rlgraph.plan.build import plan_spec

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(GOLDEN.glob("*.rl"))
MARK = re.compile(r"#\s*([EW]):\s*([a-z][a-z-]*)")
CHECK_CODES = {"tp-heads", "idle-devices"}


def expected_marks(text: str) -> list[tuple[str, str, int]]:
    return sorted((severity, code, line) for line, source in enumerate(text.splitlines(), 1)
                  for severity, code in MARK.findall(source))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden(path: Path, monkeypatch):
    monkeypatch.chdir(GOLDEN)  # paths in the output are shown relative to here
    compilation = compile_spec(path.name)
    _, diagnostics = plan_spec(compilation)
    got = sorted(("E" if d.is_error else "W", d.code, d.span.line) for d in diagnostics)
    assert got == expected_marks(path.read_text())
    rendered = render_full(diagnostics, compilation.sources)
    out = path.with_suffix(".out")
    if os.environ.get("RLGRAPH_UPDATE_GOLDEN"):
        out.write_text(rendered)
    assert out.exists(), f"{out.name} is missing: run with RLGRAPH_UPDATE_GOLDEN=1"
    assert rendered == out.read_text()


def test_every_check_code_has_a_golden_file():
    marked = {code for path in CASES for _, code, _ in expected_marks(path.read_text())}
    assert CHECK_CODES <= marked, CHECK_CODES - marked


def test_no_stray_out_files():
    assert {p.stem for p in GOLDEN.glob("*.out")} <= {p.stem for p in CASES}
