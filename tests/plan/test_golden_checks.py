"""Golden files for the plan's checks (rlgraph/plan/checks.py), run as tests/compiler's are
(tests/compiler/goldens.py), but the spec goes through `plan_spec`, which reads config.json and the
placements. Regenerate the .out files with RLGRAPH_UPDATE_GOLDEN=1."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec
from tests.compiler.goldens import assert_golden, golden_cases, marked_codes, stray_out_files

GOLDEN = Path(__file__).parent / "golden"
CASES = golden_cases(GOLDEN)
CHECK_CODES = {"tp-heads", "idle-devices"}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden(path: Path, monkeypatch):
    monkeypatch.chdir(GOLDEN)  # paths in the output are shown relative to here
    compilation = compile_spec(path.name)
    _, diagnostics = plan_spec(compilation)
    assert_golden(path, diagnostics, compilation.sources)


def test_every_check_code_has_a_golden_file():
    assert CHECK_CODES <= marked_codes(CASES), CHECK_CODES - marked_codes(CASES)


def test_no_stray_out_files():
    assert not stray_out_files(GOLDEN)
