"""`rlgraph fmt FILE...`: rewrite specs in canonical form (rules in rlgraph/lang/formatter.py).

`--check` and `--diff` change nothing: they exit 1 when a file would change,
`--check` naming it and `--diff` printing a unified diff. A file that does not
parse is never rewritten: its diagnostics are printed and the exit code is 1.
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile

from rlgraph.diagnostics import Span, error, render_full
from rlgraph.lang.formatter import FormatError, FormatterBug, format_text
from rlgraph.lang.loader import read_spec_bytes
from rlgraph.lang.parser import decode


def fmt_command(files: list[str], check: bool = False, diff: bool = False) -> int:
    write = not (check or diff)
    failed = changed = 0
    for path in files:
        data, reason = read_spec_bytes(path)  # as check reads it: a regular file of at most 1 MiB, no FIFO wait
        if reason is not None:
            problem = error("io", f"cannot read `{path}`: {reason}", Span.point(path))
            sys.stdout.write(render_full([problem], {}))
            failed += 1
            continue
        text, problem = decode(data, path)
        try:
            if problem:
                raise FormatError([problem])
            formatted = format_text(text, path)
        except FormatError as exc:
            sys.stdout.write(render_full(exc.diagnostics, {path: text or ""}))
            failed += 1
            continue
        except FormatterBug as exc:
            sys.stdout.write(f"internal error: {exc}; `{path}` is left unchanged (please report this)\n")
            failed += 1
            continue
        if formatted == text:
            continue
        changed += 1
        if diff:
            sys.stdout.writelines(difflib.unified_diff(
                text.splitlines(keepends=True), formatted.splitlines(keepends=True),
                fromfile=path, tofile=f"{path} (formatted)"))
        if check:
            sys.stdout.write(f"would reformat {path}\n")
        if write:
            try:
                _replace(path, formatted)
            except OSError as exc:
                sys.stdout.write(render_full([error("io", f"cannot write `{path}`: {exc.strerror or exc}",
                                                    Span.point(path))], {}))
                changed, failed = changed - 1, failed + 1
                continue
            sys.stdout.write(f"reformatted {path}\n")
    _summary(len(files), changed, failed, write)
    return 1 if failed or (changed and not write) else 0


def _replace(path: str, text: str) -> None:
    """Write atomically, keeping the file's permissions: a crash leaves the old file or the new one."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".rlgraph-fmt-", suffix=".rl")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
        os.chmod(temporary, os.stat(path).st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _summary(total: int, changed: int, failed: int, write: bool) -> None:
    parts = []
    if changed:
        parts.append(f"{_plural(changed, 'file')} {'reformatted' if write else 'would be reformatted'}")
    unchanged = total - changed - failed
    if unchanged:
        parts.append(f"{_plural(unchanged, 'file')} already formatted")
    if failed:
        parts.append(f"{_plural(failed, 'file')} could not be formatted")
    sys.stdout.write(", ".join(parts) + ".\n")
