"""Golden files for the graph passes: each `golden/*.rl` marks its expected diagnostics inline
(`# E: code` for an error, `# W: code` for a warning, on the offending line), and `golden/*.out`
holds the full rendered output. Regenerate the .out files with RLGRAPH_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.diagnostics import render_full

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(GOLDEN.glob("*.rl"))
MARK = re.compile(r"#\s*([EW]):\s*([a-z][a-z-]*)")

# Every code the passes of rlgraph/compiler/passes/ (beyond resolve) report has a golden file.
PASS_CODES = {"missing-block", "undefined-field", "duplicate-field", "unused-field", "cycle", "field-type",
              "algorithm", "not-updated", "duplicate-update", "unused-role", "ignored-input", "bad-sync",
              "missing-sync", "batch-divisibility", "engine-not-implemented", "tp-not-implemented",
              "several-rollouts", "dynamic-sampling", "setting-ignored", "micro-batch-unset", "greedy-group",
              "token-budget", "no-effect", "offload-unsharded", "lora-not-implemented", "unknown-env", "unused-env",
              "env-budget"}


def expected_marks(text: str) -> list[tuple[str, str, int]]:
    return sorted((severity, code, line) for line, source in enumerate(text.splitlines(), 1)
                  for severity, code in MARK.findall(source))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden(path: Path, monkeypatch):
    monkeypatch.chdir(GOLDEN)  # paths in the output are shown relative to here: `cycle.rl:19:3`
    result = compile_spec(path.name)
    got = sorted(("E" if d.is_error else "W", d.code, d.span.line) for d in result.diagnostics)
    assert got == expected_marks(path.read_text())
    rendered = render_full(result.diagnostics, result.sources)
    out = path.with_suffix(".out")
    if os.environ.get("RLGRAPH_UPDATE_GOLDEN"):
        out.write_text(rendered)
    assert out.exists(), f"{out.name} is missing: run with RLGRAPH_UPDATE_GOLDEN=1"
    assert rendered == out.read_text()


def test_every_pass_code_has_a_golden_file():
    marked = {code for path in CASES for _, code, _ in expected_marks(path.read_text())}
    assert PASS_CODES <= marked, PASS_CODES - marked


def test_no_stray_out_files():
    assert {p.stem for p in GOLDEN.glob("*.out")} <= {p.stem for p in CASES}
