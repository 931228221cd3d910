"""No traceback, ever: `check` and `fmt` on mangled specs report diagnostics and exit 0 or 1.

Hypothesis mutates the shipped specs (deletes, duplicates and swaps tokens and
lines, truncates, inserts random bytes, NUL and non-UTF-8, integer literals past
Python's 4300 digits, includes of /dev/zero, a FIFO, a 2 GiB file) and asserts that

- `rlgraph check --format json` returns 0 or 1, prints valid JSON, and every
  diagnostic has a file and a 1-based line and column; the full and concise
  renderers do not fail on the same diagnostics;
- `format_text` either raises FormatError (with positioned diagnostics) or
  returns text that is idempotent and means the same as its input.

Deterministic (derandomize) so CI is stable; RLGRAPH_FUZZ_EXAMPLES=5000 runs more.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlgraph.cli import main
from rlgraph.compiler import compile_spec
from rlgraph.diagnostics import render_concise, render_full
from rlgraph.lang.formatter import FormatError, format_text, without_spans
from rlgraph.lang.parser import decode, parse_text

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "specs").glob("**/*.rl"))
SOURCES = [p.read_bytes() for p in SPECS]
TOKEN = re.compile(rb'\s+|"[^"\n]*"|->|[{}\[\](),=.]|[^\s{}\[\](),=."]+|.', re.S)
SETTINGS = settings(max_examples=int(os.environ.get("RLGRAPH_FUZZ_EXAMPLES", "300")), deadline=None,
                    derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---- mutations ---------------------------------------------------------------------------

NASTY = [b"\x00", b"\xff", b"\xc3", b"\xe2\x82", b"\r", b"\t", b"{", b"}", b"[", b"]", b"(", b")", b"=", b"->",
         b",", b".", b'"', b"#", b"\n", b"rlgraph", b"include", b"step", b"sync", b"1e999", b"-0",
         b"99999999999999999999",
         b"80GiB", b"7B", b"1.5.5", b"role", b"model", b"pool", b"kind", b"colocate", b"actor", b"\\", b"\xef\xbb\xbf",
         b"9" * 5000, b"1" * 101 + b"GiB", b"0." + b"9" * 5000, b"1e" + b"9" * 5000]
# Includes a spec from anyone's repo may hold: a device that never ends, a FIFO no one writes (made in `workdir`),
# a file too large to be a spec, a directory. `check` must answer each with a diagnostic, at once.
HOSTILE_INCLUDES = [b'include "/dev/zero"\n', b'include "/dev/urandom"\n', b'include "pipe.rl"\n',
                    b'include "huge.rl"\n', b'include "."\n']
NASTY += HOSTILE_INCLUDES


def _pieces(data: bytes, lines: bool) -> list[bytes]:
    return data.splitlines(keepends=True) if lines else TOKEN.findall(data)


@st.composite
def mutated(draw) -> bytes:
    data = draw(st.sampled_from(SOURCES))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "insert", "replace"]))
        pieces = _pieces(data, lines=draw(st.booleans()))
        if not pieces:
            pieces = [b""]
        i = draw(st.integers(0, len(pieces) - 1))
        if kind == "delete":
            del pieces[i]
        elif kind == "duplicate":
            pieces.insert(i, pieces[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(pieces) - 1))
            pieces[i], pieces[j] = pieces[j], pieces[i]
        elif kind == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
            continue
        elif kind == "insert":
            extra = draw(st.one_of(st.sampled_from(NASTY), st.binary(min_size=1, max_size=6)))
            pieces.insert(i, extra)
        else:
            pieces[i] = draw(st.sampled_from(NASTY))
        data = b"".join(pieces)
    return data


# ---- properties -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A copy of specs/ so that mutated specs still find `common/arith_base.rl`."""
    folder = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(ROOT / "specs", folder, dirs_exist_ok=True)
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "pipe.rl")
    with open(folder / "huge.rl", "wb") as huge:  # sparse: 2 GiB of zeros that take no disk
        huge.truncate(2 << 30)
    return folder


def _check(argv: list[str]) -> tuple[int, str]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(argv)
    return code, stdout.getvalue()


def _assert_positioned(diagnostic: dict) -> None:
    for key in ("code", "severity", "message", "file", "line", "column", "end_line", "end_column", "hints", "notes"):
        assert key in diagnostic, key
    assert diagnostic["file"] and diagnostic["line"] >= 1 and diagnostic["column"] >= 1, diagnostic


@SETTINGS
@given(data=mutated())
def test_check_never_raises(workdir, data):
    path = workdir / "fuzzed.rl"
    path.write_bytes(data)
    code, out = _check(["check", str(path), "--format", "json"])
    assert code in (0, 1)
    diagnostics = json.loads(out)
    for diagnostic in diagnostics:
        _assert_positioned(diagnostic)
    assert code == (1 if any(d["severity"] == "error" for d in diagnostics) else 0)
    result = compile_spec(str(path))
    render_full(result.diagnostics, result.sources)
    render_concise(result.diagnostics)


@pytest.mark.parametrize("include", HOSTILE_INCLUDES)
def test_hostile_includes_are_diagnostics_not_hangs(workdir, include):
    for source in (SOURCES[0], SOURCES[-1]):  # at the top, and after everything else
        for data in (source.replace(b"\n", b"\n" + include, 1), source + b"\n" + include):
            (workdir / "hostile.rl").write_bytes(data)
            code, out = _check(["check", str(workdir / "hostile.rl"), "--format", "json"])
            assert code == 1
            assert [d for d in json.loads(out) if d["code"] == "bad-include" and d["line"] >= 2], out


@SETTINGS
@given(data=mutated())
def test_format_never_raises_and_keeps_meaning(data):
    text, problem = decode(data, "fuzzed.rl")
    if problem:
        return
    try:
        formatted = format_text(text, "fuzzed.rl")
    except FormatError as exc:
        assert exc.diagnostics
        for d in exc.diagnostics:
            assert d.span.line >= 1 and d.span.column >= 1
        return
    assert format_text(formatted, "fuzzed.rl") == formatted
    before, after = parse_text(text, "a")[0], parse_text(formatted, "b")[0]
    assert without_spans(before) == without_spans(after)


_PATH = st.lists(st.sampled_from(["train", "steps", "actor", "optim", "lr", "role", "data", "policy", "main", "x", ""]),
                 min_size=0, max_size=4).map(".".join)
_VALUE = st.one_of(st.sampled_from(["1", "1e-6", "80GiB", "7B", '"s"', "true", "[1, 2]", "[", "cpu", "", "=", "-1",
                                    "\x00", "{", "1 2", "x.y", "9" * 5000, "1e" + "9" * 5000]), st.text(max_size=6))


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(overrides=st.lists(st.tuples(_PATH, st.sampled_from(["=", "", "=="]), _VALUE), min_size=1, max_size=3))
def test_overrides_never_raise(overrides):
    argv = ["check", str(ROOT / "specs" / "ppo_arith.rl"), "--format", "json"]
    for path, equals, value in overrides:
        argv.append(f"--set={path}{equals}{value}")  # one word: a value starting with '-' is not an option
    code, out = _check(argv)
    assert code in (0, 1)
    for diagnostic in json.loads(out):
        _assert_positioned(diagnostic)
