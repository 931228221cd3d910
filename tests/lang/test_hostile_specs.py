"""`check` is safe on a spec from anyone's repo: includes of devices, FIFOs and huge files, and integer literals
too long for Python, give diagnostics at the line that wrote them, never a hang, an unbounded read or a
traceback (rlgraph/lang/loader.py `_read`, rlgraph/lang/parser.py `LiteralTooLong`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlgraph.cli import main
from rlgraph.compiler import compile_spec
from rlgraph.lang.loader import MAX_SPEC_BYTES, load
from rlgraph.lang.parser import MAX_INT_DIGITS

ROOT = Path(__file__).resolve().parents[2]


def including(folder: Path, target: str) -> str:
    path = folder / "main.rl"
    path.write_text(f'rlgraph 1\n# a comment\ninclude "{target}"\n')
    return str(path)


def the_error(loaded, code: str):
    (diagnostic,) = [d for d in loaded.diagnostics if d.code == code]
    return diagnostic


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_an_include_of_a_device_is_refused_without_reading_it(tmp_path):
    diagnostic = the_error(load(including(tmp_path, "/dev/zero")), "bad-include")
    assert "character device, not a regular file" in diagnostic.message
    assert (diagnostic.span.line, diagnostic.span.column) == (3, 1)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_an_include_of_a_fifo_does_not_wait_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "pipe.rl")
    diagnostic = the_error(load(including(tmp_path, "pipe.rl")), "bad-include")
    assert "FIFO" in diagnostic.message and diagnostic.span.line == 3
    main_itself = the_error(load(str(tmp_path / "pipe.rl")), "io")  # the spec named on the command line too
    assert "FIFO" in main_itself.message


def test_an_include_larger_than_a_spec_can_be_is_refused(tmp_path):
    (tmp_path / "huge.rl").write_bytes(b"rlgraph 1\n" + b"#" * MAX_SPEC_BYTES)
    diagnostic = the_error(load(including(tmp_path, "huge.rl")), "bad-include")
    assert "larger than 1,048,576 bytes" in diagnostic.message and diagnostic.span.line == 3


def test_an_include_of_a_directory_says_so(tmp_path):
    (tmp_path / "folder").mkdir()
    assert "a directory" in the_error(load(including(tmp_path, "folder")), "bad-include").message


def test_a_spec_of_exactly_the_bound_is_read(tmp_path):
    header = b"rlgraph 1\n"
    (tmp_path / "big.rl").write_bytes(header + b"#" * (MAX_SPEC_BYTES - len(header)))
    loaded = load(including(tmp_path, "big.rl"))
    assert not [d for d in loaded.diagnostics if d.code in ("bad-include", "io")]


def test_an_integer_literal_too_long_is_a_diagnostic_at_the_literal(tmp_path):
    digits = "9" * 5000  # past the 4300 digits Python converts to an int
    path = tmp_path / "long.rl"
    path.write_text(f"rlgraph 1\ntrain {{ seed = {digits} }}\n")
    result = compile_spec(str(path))
    (diagnostic,) = result.diagnostics
    assert diagnostic.code == "syntax" and "integer literal too long" in diagnostic.message
    assert (diagnostic.span.line, diagnostic.span.column) == (2, 16)
    assert diagnostic.span.end_column == 16 + len(digits)


def test_an_integer_literal_at_the_bound_parses(tmp_path):
    path = tmp_path / "long.rl"
    path.write_text(f"rlgraph 1\ntrain {{ seed = {'9' * MAX_INT_DIGITS} }}\n")
    assert not [d for d in compile_spec(str(path)).diagnostics if d.code == "syntax"]


def test_check_on_a_long_literal_in_an_override_exits_1_without_a_traceback(capsys):
    code = main(["check", str(ROOT / "specs" / "grpo_arith.rl"), "--format", "concise",
                 "--set", "train.seed=" + "9" * 5000])
    out = capsys.readouterr()
    assert code == 1 and "error[bad-override]" in out.out and "Traceback" not in out.out + out.err


@pytest.mark.parametrize("what", ["fifo", "device"])
def test_fmt_reads_a_spec_as_check_does_no_fifo_wait_no_endless_device(tmp_path, capsys, what):
    path = tmp_path / "spec.rl"
    if what == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    assert main(["fmt", "--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "error[io]" in out and "not a regular file" in out and "Traceback" not in out
