"""Golden specs: each `tests/golden/*.rl` is checked as a user would, from the repo root.

The expected diagnostics are written inline, on the line they point at, as in
mypy's test-data:

    pool = mian  # E: unknown-pool          (an error; `# W: code` for a warning)

and the test asserts that the set of (file, line, severity, code) that
`rlgraph check` reports equals the set of markers, in the golden file and in
every file it includes. Overrides come from a comment `# ARGS: -s key=value ...`;
a diagnostic about the N-th override is expected by `# E <override N>: code`.

The full rendered output is kept next to each spec as `NAME.out`. After a
deliberate change in wording, regenerate them with

    RLGRAPH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/golden

and read the diff before committing it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from rlgraph.cli import main
from rlgraph.lang.loader import load

GOLDEN = Path(__file__).resolve().parent
ROOT = GOLDEN.parents[1]
CASES = sorted(p.relative_to(ROOT).as_posix() for p in GOLDEN.glob("*.rl"))
UPDATE = os.environ.get("RLGRAPH_UPDATE_GOLDEN") == "1"

MARKER = re.compile(r"#\s*([EW])(?:\s*<override (\d+)>)?:\s*([a-z][a-z-]*)")
ARGS = re.compile(r"^#\s*ARGS:(.*)$", re.M)
SEVERITY = {"E": "error", "W": "warning"}


def _args(path: str) -> list[str]:
    found = ARGS.search(Path(path).read_text())
    return shlex.split(found.group(1)) if found else []


def _markers(file: str, text: str) -> set[tuple[str, int, str, str]]:
    out = set()
    for number, line in enumerate(text.splitlines(), 1):
        if ARGS.match(line):
            continue
        for severity, override, code in MARKER.findall(line):
            where = (f"<override {override}>", 1) if override else (file, number)
            out.add((*where, SEVERITY[severity], code))
    return out


def expected(path: str) -> set[tuple[str, int, str, str]]:
    """Markers of the golden file and of every file it includes."""
    out = set()
    for file, text in load(path).sources.items():
        out |= _markers(file, text)
    return out


def _run(argv: list[str]) -> tuple[int, str]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(argv)
    return code, stdout.getvalue()


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # diagnostics show paths relative to the working directory


def test_there_are_golden_cases():
    assert len(CASES) >= 15


@pytest.mark.parametrize("path", CASES)
def test_inline_markers(path):
    code, out = _run(["check", path, *_args(path), "--format", "json"])
    reported = {(d["file"], d["line"], d["severity"], d["code"]) for d in json.loads(out)}
    want = expected(path)
    assert reported == want, (
        f"\nreported but not marked: {sorted(reported - want)}\nmarked but not reported: {sorted(want - reported)}")
    assert code == (1 if any(severity == "error" for *_, severity, _ in want) else 0)


@pytest.mark.parametrize("path", CASES)
def test_rendered_output(path):
    _, out = _run(["check", path, *_args(path)])
    golden = ROOT / Path(path).with_suffix(".out")
    if UPDATE:
        golden.write_text(out)
    assert golden.exists(), f"{golden} is missing: run with RLGRAPH_UPDATE_GOLDEN=1 to create it"
    assert out == golden.read_text()


def test_every_output_has_its_spec():
    stale = [p.name for p in GOLDEN.glob("*.out") if not p.with_suffix(".rl").exists()]
    assert not stale


def test_a_syntax_error_of_each_kind():
    """Each syntax golden hits a different friendly message (a `match_examples` class)."""
    messages = {}
    for path in (c for c in CASES if Path(c).name.startswith("syntax_")):
        _, out = _run(["check", path, "--format", "json"])
        (diagnostic,) = json.loads(out)
        messages[path] = diagnostic["message"]
    assert len(messages) >= 5
    assert len(set(messages.values())) == len(messages), messages
    assert not any(m.startswith("unexpected ") and ":" not in m for m in messages.values()), messages
