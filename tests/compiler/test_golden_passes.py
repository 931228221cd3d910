"""Golden files for the graph passes (the runner: tests/compiler/goldens.py). Regenerate the .out files with
RLGRAPH_UPDATE_GOLDEN=1."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec

from .goldens import assert_golden, golden_cases, marked_codes, stray_out_files

GOLDEN = Path(__file__).parent / "golden"
CASES = golden_cases(GOLDEN)

# Every code the passes of rlgraph/compiler/passes/ (beyond resolve) report has a golden file; but
# engine-not-implemented, which no spec reaches while this runtime implements every engine the language names
# (tests/compiler/test_runtime_support.py checks it with a runtime that lacks one).
PASS_CODES = {"missing-block", "undefined-field", "duplicate-field", "unused-field", "cycle", "field-type",
              "algorithm", "not-updated", "duplicate-update", "unused-role", "ignored-input", "bad-sync",
              "missing-sync", "batch-divisibility", "tp-not-implemented",
              "several-rollouts", "dynamic-sampling", "setting-ignored", "micro-batch-unset", "greedy-group",
              "token-budget", "no-effect", "offload-unsharded", "lora-not-implemented", "unknown-env", "unused-env",
              "env-budget"}


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_golden(path: Path, monkeypatch):
    monkeypatch.chdir(GOLDEN)  # paths in the output are shown relative to here: `cycle.rl:19:3`
    result = compile_spec(path.name)
    assert_golden(path, result.diagnostics, result.sources)


def test_every_pass_code_has_a_golden_file():
    assert PASS_CODES <= marked_codes(CASES), PASS_CODES - marked_codes(CASES)


def test_no_stray_out_files():
    assert not stray_out_files(GOLDEN)
