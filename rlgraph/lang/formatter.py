"""A spec file in canonical form: what `rlgraph fmt` writes.

The rules (docs/spec.md, "Formatting"):

- two-space indentation; `key = value`; `a, b -> call(k = v) -> c`; `[1, 2]`;
- the header first; one blank line between top-level items;
- one entry or statement per line. A block keeps to one line only when it was
  on one line, holds no nested block and fits in 100 columns; entries on one
  line are separated by two spaces: `pool main { nodes = 1  devices_per_node = 1 }`.
  A `step` is always one statement per line;
- blank lines between entries, statements and comments are kept, collapsed to
  one; none after `{` or before `}`;
- every comment is kept: own-line comments stay before what follows them, a
  comment at the end of a line stays there (two spaces before `#`). A comment
  inside a statement that is joined onto one line moves to the line before it.
  Comments right under the header (no blank line between) stay attached to it;
- numbers and strings are printed as written (`1e-4` stays `1e-4`).

Formatting never changes meaning: the output is parsed again and compared with
the input (syntax tree without positions, and every comment), and a mismatch is
an error rather than a silently rewritten file.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import Counter

from rlgraph.diagnostics import Diagnostic, Span
from rlgraph.lang import ast
from rlgraph.lang.parser import parse_text

WIDTH = 100
INDENT = "  "

_STRING_AT_END = re.compile(r'"(?:[^"\\\n]|\\.)*"$')


class FormatError(Exception):
    """The text cannot be formatted because it does not parse; `diagnostics` says why."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__("; ".join(f"{d.span}: {d.message}" for d in diagnostics))
        self.diagnostics = diagnostics


class FormatterBug(Exception):
    """The formatted text would mean something else than the input (a bug in the formatter)."""


def format_text(text: str, file: str = "<text>") -> str:
    """The canonical form of a spec's text. Raises FormatError when the text does not parse."""
    spec, diagnostics = parse_text(text, file)
    if spec is None:
        raise FormatError(diagnostics)
    formatted = _Printer(text, spec).render()
    _verify(spec, formatted, file)
    return formatted


# ---- positions -------------------------------------------------------------------


def _start(span: Span) -> tuple[int, int]:
    return span.line, span.column


def _end(span: Span) -> tuple[int, int]:
    return span.end_line, span.end_column


def _inside(comment: ast.Comment, span: Span) -> bool:
    return _start(span) <= _start(comment.span) < _end(span)


# ---- the printer ------------------------------------------------------------------


class _Printer:
    def __init__(self, text: str, spec: ast.SpecFile):
        self.text = text
        self.spec = spec
        self.comments = sorted(spec.comments, key=lambda c: _start(c.span))
        self.line_starts = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]
        self.out: list[str] = []

    def render(self) -> str:
        children = ([self.spec.header] if self.spec.header else []) + list(self.spec.items)
        self._sequence(children, (1, 1), (len(self.line_starts) + 1, 1), depth=0, opening_line=None)
        return "\n".join(self.out) + "\n" if self.out else ""

    # ---- source text
    def _offset(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column - 1

    def _source(self, span: Span) -> str:
        return self.text[self._offset(span.line, span.column):self._offset(span.end_line, span.end_column)]

    def _brace_after(self, line: int, column: int) -> tuple[int, int]:
        """The position of the `{` that opens a block whose head ends at (line, column)."""
        i = self._offset(line, column)
        while self.text[i] != "{":  # only whitespace and comments can come between
            i = self.text.index("\n", i) if self.text[i] == "#" else i + 1
        line = bisect.bisect_right(self.line_starts, i)
        return line, i - self.line_starts[line - 1] + 1

    def _comments_between(self, start: tuple[int, int], end: tuple[int, int]) -> list[ast.Comment]:
        return [c for c in self.comments if start <= _start(c.span) < end]

    # ---- lines
    def _emit(self, depth: int, text: str) -> None:
        self.out.append(INDENT * depth + text)

    def _blank(self) -> None:
        if self.out and self.out[-1] != "":
            self.out.append("")

    def _trailing(self, comment: ast.Comment) -> None:
        self.out[-1] += "  " + comment.text.rstrip()

    def _sequence(self, children, start, end, depth: int, opening_line: int | None) -> None:
        """The children of a file or block, with the comments between them, in source order.

        A comment inside a child's span belongs to the child; the others are placed
        here: at the end of the line they share with a child's end (or with the
        opening `{`), else on a line of their own.
        """
        top = depth == 0
        loose = [c for c in self._comments_between(start, end)
                 if not any(_inside(c, child.span) for child in children)]
        elements = sorted([(_start(c.span), c) for c in loose] + [(_start(n.span), n) for n in children],
                          key=lambda pair: pair[0])
        previous = None  # the previous element placed here
        for _, element in elements:
            if isinstance(element, ast.Comment):
                line = element.span.line
                if previous is not None and not isinstance(previous, ast.Comment) and line == previous.span.end_line:
                    self._trailing(element)
                    continue
                if previous is None and line == opening_line:
                    self._trailing(element)
                    continue
            if previous is not None and self._blank_between(previous, element, top):
                self._blank()
            if isinstance(element, ast.Comment):
                self._emit(depth, element.text.rstrip())
            else:
                self._node(element, depth)
            previous = element

    def _blank_between(self, previous, element, top: bool) -> bool:
        blank_in_source = element.span.line - previous.span.end_line > 1
        if isinstance(previous, ast.Comment) or not top:
            return blank_in_source
        if isinstance(previous, ast.Header) and isinstance(element, ast.Comment):
            return blank_in_source  # a description right under the header stays there
        return True  # one blank line after every top-level item

    def _node(self, node, depth: int) -> None:
        if isinstance(node, (ast.Block, ast.Step)):
            self._block(node, depth)
            return
        for comment in self._comments_between(_start(node.span), _end(node.span)):
            self._emit(depth, comment.text.rstrip())  # a comment inside a statement joined onto one line
        self._emit(depth, self._leaf(node))

    def _block(self, block: ast.Block | ast.Step, depth: int) -> None:
        if isinstance(block, ast.Step):
            head, children = "step", block.statements
            head_end = (block.span.line, block.span.column + len("step"))
        else:
            head = block.keyword + (f" {block.name}" if block.name else "")
            children = block.entries
            head_end = _end(block.name_span or block.keyword_span)
        brace = self._brace_after(*head_end)
        for comment in self._comments_between(_start(block.span), brace):
            self._emit(depth, comment.text.rstrip())  # between the name and `{`
        close = (block.span.end_line, block.span.end_column - 1)
        inner = self._comments_between(brace, close)
        if not children and not inner:
            self._emit(depth, head + " {}")
            return
        one_line = self._one_line(block, head, depth, inner)
        if one_line is not None:
            self._emit(depth, one_line)
            return
        self._emit(depth, head + " {")
        self._sequence(children, brace, close, depth + 1, opening_line=brace[0])
        self._emit(depth, "}")

    def _one_line(self, block, head: str, depth: int, inner) -> str | None:
        """The block on one line, if it was on one line, holds only `key = value` entries and fits."""
        if isinstance(block, ast.Step) or inner or block.span.line != block.span.end_line:
            return None
        if not all(isinstance(entry, ast.Assign) for entry in block.entries):
            return None
        text = head + " { " + "  ".join(self._leaf(entry) for entry in block.entries) + " }"
        return text if len(INDENT * depth + text) <= WIDTH else None

    # ---- one-line constructs
    def _leaf(self, node) -> str:
        if isinstance(node, ast.Header):
            return f"rlgraph {node.version.text}"
        if isinstance(node, ast.Include):
            last_line = self._source(node.span).split("\n")[-1]
            return "include " + _STRING_AT_END.search(last_line).group()
        if isinstance(node, ast.Assign):
            return f"{node.key} = {self._value(node.value)}"
        if isinstance(node, ast.Sync):
            return f"sync {node.source.name} -> {node.target.name}"
        if isinstance(node, ast.Flow):
            parts = [", ".join(f.name for f in node.inputs), self._call(node.call)]
            if node.outputs:
                parts.append(", ".join(f.name for f in node.outputs))
            return " -> ".join(parts)
        raise TypeError(f"cannot format {type(node).__name__}")

    def _call(self, call: ast.Call) -> str:
        text = call.label
        if call.kwargs:
            text += "(" + ", ".join(self._leaf(kwarg) for kwarg in call.kwargs) + ")"
        return text

    def _value(self, value: ast.Value) -> str:
        if isinstance(value, ast.Number):
            return value.text
        if isinstance(value, ast.String):
            return self._source(value.span)
        if isinstance(value, ast.Bool):
            return "true" if value.value else "false"
        if isinstance(value, ast.Ident):
            return value.value
        return "[" + ", ".join(self._value(item) for item in value.items) + "]"


# ---- the meaning check ---------------------------------------------------------------


def without_spans(node):
    """A syntax tree as nested tuples with every position (and the file name) left out."""
    if isinstance(node, Span):
        return None
    if isinstance(node, ast.SpecFile):
        return without_spans(node.header), without_spans(node.items)
    if dataclasses.is_dataclass(node):
        return (type(node).__name__,) + tuple(
            without_spans(getattr(node, f.name)) for f in dataclasses.fields(node) if "span" not in f.name)
    if isinstance(node, (tuple, list)):
        return tuple(without_spans(item) for item in node)
    return node


def _verify(before: ast.SpecFile, formatted: str, file: str) -> None:
    after, diagnostics = parse_text(formatted, file)
    if after is None:
        raise FormatterBug(f"{file}: the formatted text does not parse: {diagnostics[0].message}")
    if without_spans(after) != without_spans(before):
        raise FormatterBug(f"{file}: formatting would change the meaning of the spec")
    if Counter(c.text.rstrip() for c in after.comments) != Counter(c.text.rstrip() for c in before.comments):
        raise FormatterBug(f"{file}: formatting would lose or change a comment")
