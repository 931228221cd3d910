"""Render diagnostics like ruff: a full form for people, a concise one for CI, json for tools."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from rlgraph.diagnostics.diagnostic import Diagnostic


def _sort_key(d: Diagnostic):
    return (d.span.file, d.span.line, d.span.column, d.code)


def render_concise(diagnostics: Iterable[Diagnostic]) -> str:
    return "".join(
        f"{d.span}: {d.severity}[{d.code}] {d.message}\n" for d in sorted(diagnostics, key=_sort_key)
    )


def _snippet(d: Diagnostic, sources: Mapping[str, str]) -> list[str]:
    text = sources.get(d.span.file)
    lines = text.splitlines() if text is not None else []
    if not 1 <= d.span.line <= len(lines):
        return []
    source_line = lines[d.span.line - 1].expandtabs(1)
    gutter = len(str(d.span.line))
    start = max(d.span.column - 1, 0)
    end = d.span.end_column - 1 if d.span.end_line == d.span.line else len(source_line)
    width = max(end - start, 1)
    pad = " " * gutter
    caret = " " * start + "^" * width + (f" {d.label}" if d.label else "")
    return [f"{pad} |", f"{d.span.line} | {source_line}", f"{pad} | {caret.rstrip()}"]


def render_full(diagnostics: Iterable[Diagnostic], sources: Mapping[str, str]) -> str:
    out: list[str] = []
    for d in sorted(diagnostics, key=_sort_key):
        out.append(f"{d.severity}[{d.code}]: {d.message}")
        out.append(f" --> {d.span}")
        out.extend(_snippet(d, sources))
        for message, span in d.notes:
            out.append(f"  note: {message} at {span}")
        for hint in d.hints:
            out.append(f"  help: {hint}")
        out.append("")
    return "\n".join(out) + ("\n" if out else "")


def render_json(diagnostics: Iterable[Diagnostic]) -> str:
    return json.dumps([d.to_json() for d in sorted(diagnostics, key=_sort_key)], indent=2) + "\n"


def render(diagnostics, sources, fmt: str = "full") -> str:
    if fmt == "concise":
        return render_concise(diagnostics)
    if fmt == "json":
        return render_json(diagnostics)
    return render_full(diagnostics, sources)
