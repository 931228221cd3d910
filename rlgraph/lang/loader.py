"""Read a spec file and the files it includes, and merge them into one list of items.

Include rule (documented in docs/spec.md):
- `include "path"` is resolved relative to the including file and expands in
  place, so everything before it in the including file is overridden by it and
  everything after it overrides it.
- Two definitions of the same block (same kind and name) from *different* files
  merge key by key: the later file's keys win, nested blocks (`optim`) merge the
  same way, untouched keys are kept. The same block twice in *one* file is a
  `duplicate-name` error.
- A later `step` replaces an earlier one whole: a dataflow is not merged.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace

from rlgraph.diagnostics import Diagnostic, Span, error
from rlgraph.lang import ast
from rlgraph.lang.parser import decode, parse_text
from rlgraph.lang.schema import SUPPORTED_VERSIONS


@dataclass
class Loaded:
    """The merged items of a spec and everything needed to report on it."""

    root: str
    blocks: list[ast.Block] = field(default_factory=list)
    step: ast.Step | None = None
    sources: dict[str, str] = field(default_factory=dict)
    files: dict[str, ast.SpecFile] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _display(path: str) -> str:
    """Paths are shown relative to the working directory when they are below it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _check_header(spec: ast.SpecFile) -> list[Diagnostic]:
    if spec.header is None:  # point at the first item: the header belongs before it
        first = spec.items[0] if spec.items else None
        span = (first.keyword_span if isinstance(first, ast.Block) else first.span) if first else Span.point(spec.path)
        return [error("missing-header", "the spec does not start with a version header", span,
                      "add `rlgraph 1` as the first line", label="`rlgraph 1` belongs before this")]
    version = spec.header.version
    if version.unit or version.value not in SUPPORTED_VERSIONS:
        supported = ", ".join(str(v) for v in SUPPORTED_VERSIONS)
        return [error("unsupported-version", f"spec language version `{version.text}` is not supported",
                      version.span, f"this rlgraph reads version {supported}: write `rlgraph 1`")]
    return []


def _duplicates_within(entries, where: str) -> list[Diagnostic]:
    """The same key twice in one block, or the same block twice in one file."""
    seen: dict[str, Span] = {}
    out = []
    for entry in entries:
        if isinstance(entry, ast.Assign):
            key, span = entry.key, entry.key_span
        else:
            key = entry.keyword if entry.name is None else f"{entry.keyword} {entry.name}"
            span = entry.name_span or entry.keyword_span
            out += _duplicates_within(entry.entries, f"`{key}`")
        if key in seen:
            out.append(error("duplicate-name", f"`{key}` is defined twice in {where}", span,
                             "remove one of them (to override a definition, put it in a file that includes this one)",
                             notes=[("first defined", seen[key])]))
        else:
            seen[key] = span
    return out


def _merge(old: ast.Block, new: ast.Block) -> ast.Block:
    """Later definitions win key by key; nested blocks merge recursively."""
    entries = list(old.entries)
    for entry in new.entries:
        if isinstance(entry, ast.Block):
            index = next((i for i, e in enumerate(entries)
                          if isinstance(e, ast.Block) and e.keyword == entry.keyword), None)
            if index is not None:
                entries[index] = _merge(entries[index], entry)
                continue
        else:
            entries = [e for e in entries if not (isinstance(e, ast.Assign) and e.key == entry.key)]
        entries.append(entry)
    return replace(old, entries=tuple(entries), span=new.span)


def _block_key(block: ast.Block) -> tuple[str, str | None]:
    return block.keyword, block.name


def load(path: str, text: str | None = None) -> Loaded:
    """The spec at `path`; with `text`, that text stands for the file at `path` (read from nowhere: includes
    resolve beside `path`, diagnostics name it), as when a notebook compiles a spec it holds as a string."""
    loaded = Loaded(root=_display(os.path.abspath(path)))
    merged: dict[tuple, ast.Block] = {}
    _load_file(os.path.abspath(path), None, [], loaded, merged, text)
    loaded.blocks = list(merged.values())
    return loaded


MAX_SPEC_BYTES = 1 << 20  # a spec is text: a larger "spec" is a mistake or hostile


def read_spec_bytes(path: str) -> tuple[bytes, str | None]:
    """(the file's bytes, None) or (b"", why it is not read). `check` and `fmt` must be safe on a spec from anyone's
    repo: only a regular file of at most MAX_SPEC_BYTES is read, so an include of /dev/zero does not read without
    end, and one of a FIFO does not wait for a writer (O_NONBLOCK: the open returns at once, and fstat then says
    what it is)."""
    data, reason = b"", None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            kind = _not_regular(os.fstat(fd).st_mode)
            if kind is not None:
                reason = f"it is {kind}, not a regular file"
            else:
                while len(data) <= MAX_SPEC_BYTES and (chunk := os.read(fd, MAX_SPEC_BYTES + 1 - len(data))):
                    data += chunk
                if len(data) > MAX_SPEC_BYTES:
                    reason = f"it is larger than {MAX_SPEC_BYTES:,} bytes (1 MiB), and a spec is text of at most that"
        finally:
            os.close(fd)
    except OSError as exc:
        reason = exc.strerror or str(exc)
    return (b"", reason) if reason is not None else (data, None)


def _read(path: str, display: str, via: ast.Include | None, loaded: Loaded) -> str | None:
    data, reason = read_spec_bytes(path)
    if reason is not None:
        if via is None:
            loaded.diagnostics.append(error("io", f"cannot read `{display}`: {reason}", Span.point(display)))
        else:
            loaded.diagnostics.append(error(
                "bad-include", f"cannot include `{via.path}`: {reason}", via.span,
                f"the path is relative to the including file; it resolved to `{display}`"))
        return None
    text, problem = decode(data, display)
    if problem:
        loaded.diagnostics.append(problem)
    return text


def _not_regular(mode: int) -> str | None:
    """What a file that is not a regular file is ("a FIFO"), or None for a regular file."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a file"


def _load_file(path: str, via: ast.Include | None, stack: list[str], loaded: Loaded, merged: dict,
               text: str | None = None) -> None:
    display = _display(path)
    text = _read(path, display, via, loaded) if text is None else text
    if text is None:
        return
    loaded.sources[display] = text
    spec, problems = parse_text(text, display)
    loaded.diagnostics += problems
    if spec is None:
        return
    loaded.files[display] = spec
    loaded.diagnostics += _check_header(spec)
    loaded.diagnostics += _duplicates_within([i for i in spec.items if isinstance(i, ast.Block)], display)
    steps = [i for i in spec.items if isinstance(i, ast.Step)]
    for extra in steps[1:]:
        loaded.diagnostics.append(error("duplicate-name", "`step` is defined twice in this file", extra.span,
                                        "write the whole dataflow in one `step` block",
                                        notes=[("first defined", steps[0].span)]))
    seen_here: set[tuple] = set()
    for item in spec.items:
        if isinstance(item, ast.Include):
            target = os.path.normpath(os.path.join(os.path.dirname(path), item.path))
            if target in stack + [path]:
                chain = " -> ".join(_display(p) for p in stack + [path, target])
                loaded.diagnostics.append(error("include-cycle", f"include cycle: {chain}", item.span,
                                                "move the shared part into a file that includes neither"))
                continue
            _load_file(target, item, stack + [path], loaded, merged)
        elif isinstance(item, ast.Step):
            if item is steps[0]:
                loaded.step = item
        else:
            key = _block_key(item)
            if key in merged and key not in seen_here:
                merged[key] = _merge(merged[key], item)
            elif key not in merged:
                merged[key] = item
            seen_here.add(key)
