"""`rlgraph import verl FILE [--device-memory 80GiB] [-s KEY=VALUE ...] [-o OUT.rl]`: a verl launch -> a formatted
spec. `-s` adds verl overrides after the launch's own (as `bash run.sh KEY=VALUE` would).

The spec goes to OUT.rl (or standard output); the settings it cannot map go to standard error as
warnings, and into the spec as comments at their place. A launch that cannot be read is one clear line
and exit code 1, never a traceback. Like `check` and `fmt`, it imports neither torch nor ray.
"""

from __future__ import annotations

import os
import sys

from rlgraph.importers.launch import LaunchError, add_overrides, read_launch
from rlgraph.importers.verl import ImportProblem, import_verl
from rlgraph.lang.formatter import FormatError, format_text


def import_verl_text(data: bytes, name: str, device_memory: str | None = None,
                     overrides: list[str] = ()) -> tuple[str, list[str]]:
    """The formatted spec for a launch's bytes (and verl overrides after it), and the warnings. Raises LaunchError
    or ImportProblem."""
    launch = read_launch(data, name)
    add_overrides(launch, list(overrides))
    result = import_verl(launch, os.path.basename(name), device_memory)
    try:
        return format_text(result.text, name), result.warnings
    except FormatError as exc:  # a value the spec grammar cannot hold: the importer's bug, said plainly
        raise ImportProblem([f"the imported spec does not parse ({exc}); please report this"]) from None


def import_verl_command(path: str, device_memory: str | None, output: str | None, overrides: list[str] = ()) -> int:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        sys.stderr.write(f"error: cannot read `{path}`: {exc.strerror or exc}\n")
        return 1
    try:
        text, warnings = import_verl_text(data, path, device_memory, overrides)
    except LaunchError as exc:
        sys.stderr.write(f"error: {path}: {exc}\n")
        return 1
    except ImportProblem as exc:
        for problem in exc.errors:
            sys.stderr.write(f"error: {path}: {problem}\n")
        return 1
    for warning in warnings:
        sys.stderr.write(f"warning: {path}: {warning}\n")
    if output:
        try:
            with open(output, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
        except OSError as exc:
            sys.stderr.write(f"error: cannot write `{output}`: {exc.strerror or exc}\n")
            return 1
        sys.stderr.write(f"wrote {output} ({len(warnings)} setting{'s' * (len(warnings) != 1)} not mapped or "
                         "left as written: see the warnings above and the comments in the spec)\n")
    else:
        sys.stdout.write(text)
    return 0
