"""Set a key of a block in a spec's text, the way a person would edit the file.

`set_key(text, "role", "actor", "micro_batch", 4)`:

- the key is written in the file's `role actor` block: its value is replaced where it is written;
- the block is in the file but the key is not: the key is added as the block's last entry;
- the block is not in the file (it comes from an included file): a block `role actor { micro_batch = 4 }`
  is appended at the end of the file. A block of the same kind and name in a later file merges key by key
  (rlgraph/lang/loader.py), and the end of the including file comes after every include, so it wins.
- the value None removes the key where the file's block writes it (its line and comment when it has one to
  itself); a key an included file sets stays (the spec is planned again and says so).

Everything else (comments, blank lines, layout) is left as it is; run the formatter on the result.
Only this file's text is edited, never an included file: a key set in an included file is set again here.
"""

from __future__ import annotations

import json
import re

from rlgraph.diagnostics import Span
from rlgraph.lang import ast
from rlgraph.lang.formatter import FormatError
from rlgraph.lang.parser import parse_text

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_WITH_UNIT = re.compile(r"[0-9]+(\.[0-9]+)?[A-Za-z]+$")  # 80GiB, 1.5B: a size or count, written bare


def value_text(value: object) -> str:
    """A Python value as it is written in a spec: `true`, `4`, `0.5`, `fsdp`, `80GiB`, `"a path"`, `[1, 2]`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        bare = (_BARE.match(value) and value not in ("true", "false")) or _WITH_UNIT.match(value)
        return value if bare else json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as a spec value")


def set_key(text: str, keyword: str, name: str, key: str, value: object, file: str = "<text>") -> str:
    """`text` with `key = value` in the top-level block `keyword name`. Raises FormatError when it does not parse."""
    spec, diagnostics = parse_text(text, file)
    if spec is None:
        raise FormatError(diagnostics)
    block = next((item for item in reversed(spec.items)
                  if isinstance(item, ast.Block) and item.keyword == keyword and item.name == name), None)
    if value is None:  # unset: remove the key where this file writes it (an included file's stays)
        assign = block.get(key) if block is not None else None
        if not isinstance(assign, ast.Assign):
            return text
        start, end = _offset(text, assign.span.line, assign.span.column), _end(text, assign.value.span)
        line_start, line_end = text.rfind("\n", 0, start) + 1, text.find("\n", end)
        rest = text[end:] if line_end < 0 else text[end:line_end]
        if not text[line_start:start].strip() and (not rest.strip() or rest.strip().startswith("#")):
            return text[:line_start] + ("" if line_end < 0 else text[line_end + 1:])  # the line, and its comment
        return text[:start].rstrip(" ") + " " + text[end:].lstrip(" ")
    written = value_text(value)
    if block is None:
        return text.rstrip("\n") + f"\n\n{keyword} {name} {{ {key} = {written} }}\n"
    assign = block.get(key)
    if isinstance(assign, ast.Assign):
        start, end = _offset(text, assign.value.span.line, assign.value.span.column), _end(text, assign.value.span)
        return text[:start] + written + text[end:]
    close = _end(text, block.span) - 1  # the block's `}`
    if block.span.line == block.span.end_line:  # a one-line block stays one line
        return text[:close].rstrip(" ") + f"  {key} = {written} " + text[close:]
    line_start = text.rfind("\n", 0, close) + 1
    indent = " " * (block.span.column - 1) + "  "
    if text[line_start:close].strip():  # `}` shares its line with an entry: put the key on a line of its own
        return text[:close].rstrip(" ") + f"\n{indent}{key} = {written}\n" + text[close:]
    return text[:line_start] + f"{indent}{key} = {written}\n" + text[line_start:]


def _offset(text: str, line: int, column: int) -> int:
    start = 0
    for _ in range(line - 1):
        start = text.index("\n", start) + 1
    return start + column - 1


def _end(text: str, span: Span) -> int:
    return _offset(text, span.end_line, span.end_column)
