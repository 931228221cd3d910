"""Text -> SpecFile. Lark (LALR) with positions; syntax errors become Diagnostics."""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from importlib import resources

from lark import (Lark, Token, Transformer, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput,
                  UnexpectedToken, v_args)
from lark.exceptions import VisitError

from rlgraph.contract.cache import build_lock, cache_dir
from rlgraph.diagnostics import Diagnostic, Span, error
from rlgraph.lang import ast
from rlgraph.lang.schema import BLOCKS

_UNIT = re.compile(r"([KMGTP]i?B|[KMBT])$")


@lru_cache(maxsize=None)
def _lark() -> Lark:
    text = resources.files("rlgraph.grammar").joinpath("rlgraph.lark").read_text()
    # `value` is a second start symbol so that `-s key=value` overrides parse with the same rules.
    options = dict(parser="lalr", start=["start", "value"], propagate_positions=True, maybe_placeholders=False,
                   lexer_callbacks={"COMMENT": _CommentSink.add})
    # Lark keeps the parser's tables in a file once built: building them checks every pair of the grammar's
    # terminals for collisions when `interegular` is installed (vLLM's dependencies install it), 0.1 s of every
    # command against 0.003 s to load them. It stores a digest of the grammar, its own version and Python's in the
    # file and builds the tables again, rewriting the file, when one differs or the file cannot be read (one cut
    # short by a killed process). It writes in place, so it runs under the cache's lock: no process reads a file
    # another is writing. The grammar's digest in the name keeps two checkouts from taking turns.
    tables = cache_dir() / "grammar" / f"rlgraph-{hashlib.sha256(text.encode()).hexdigest()[:16]}.lark"
    try:
        with build_lock(tables):
            return Lark(text, cache=str(tables), **options)
    except OSError:  # no cache folder (not writable): built each time
        return Lark(text, **options)


class _CommentSink:
    """Lark reports ignored COMMENT tokens through a callback; the formatter needs them."""

    tokens: list[Token] = []

    @classmethod
    def add(cls, token: Token) -> None:
        cls.tokens.append(token)


def _span(file: str, item) -> Span:
    return Span(file, item.line, item.column, item.end_line, item.end_column)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text[1:-1])


def parse_number(text: str) -> tuple[float | int, str | None]:
    """`80GiB` -> (80, "GiB"); `1e-6` -> (1e-06, None); `7` -> (7, None)."""
    match = _UNIT.search(text)
    unit = match.group(1) if match else None
    digits = text[: match.start()] if match else text
    value = float(digits) if any(c in digits for c in ".eE") else int(digits)
    return value, unit


# An integer literal has at most this many digits. No setting takes a number near 10**100, and Python
# refuses to convert one of more than 4300 digits at all (a traceback, not a diagnostic, without this).
MAX_INT_DIGITS = 100


class LiteralTooLong(UnexpectedInput):
    """An integer literal of more than MAX_INT_DIGITS digits; raised while the tree becomes the AST."""

    def __init__(self, token: Token):
        self.token = token
        self.line, self.column = token.line, token.column
        self.pos_in_stream = token.start_pos

    def __str__(self) -> str:
        digits = sum(c.isdigit() for c in self.token)
        return f"integer literal too long: {digits} digits, where a spec's numbers have at most {MAX_INT_DIGITS}"


class _ToAst(Transformer):
    def __init__(self, file: str):
        super().__init__()
        self.file = file

    def _s(self, item) -> Span:
        return _span(self.file, item)

    # ---- values
    def number(self, children):
        (tok,) = children
        if not any(c in tok for c in ".eE") and sum(c.isdigit() for c in tok) > MAX_INT_DIGITS:
            raise LiteralTooLong(tok)
        value, unit = parse_number(str(tok))
        return ast.Number(value, unit, str(tok), self._s(tok))

    def string(self, children):
        (tok,) = children
        return ast.String(_unescape(str(tok)), self._s(tok))

    @v_args(meta=True)
    def true(self, meta, children):
        return ast.Bool(True, self._s(meta))

    @v_args(meta=True)
    def false(self, meta, children):
        return ast.Bool(False, self._s(meta))

    def ident(self, children):
        (tok,) = children
        return ast.Ident(str(tok), self._s(tok))

    @v_args(meta=True)
    def list(self, meta, children):
        return ast.List(tuple(c for c in children if c is not None), self._s(meta))

    # ---- blocks
    @v_args(meta=True)
    def assign(self, meta, children):
        key, value = children
        return ast.Assign(str(key), value, self._s(meta), self._s(key))

    kwarg = assign

    @v_args(meta=True)
    def subblock(self, meta, children):
        keyword, *entries = children
        return ast.Block(str(keyword), None, tuple(entries), self._s(meta), self._s(keyword))

    @v_args(meta=True)
    def block(self, meta, children):
        keyword = children[0]
        rest = children[1:]
        name = rest[0] if rest and isinstance(rest[0], Token) else None
        entries = rest[1:] if name is not None else rest
        return ast.Block(str(keyword), str(name) if name else None, tuple(entries), self._s(meta),
                         self._s(keyword), self._s(name) if name else None)

    # ---- step
    def fields(self, children):
        return tuple(ast.FieldRef(str(t), self._s(t)) for t in children)

    @v_args(meta=True)
    def arguments(self, meta, children):
        return tuple(c for c in children if c is not None)

    @v_args(meta=True)
    def call(self, meta, children):
        target = children[0]
        method = children[1] if len(children) > 1 and isinstance(children[1], Token) else None
        kwargs = children[-1] if children and isinstance(children[-1], tuple) else ()
        return ast.Call(str(target), str(method) if method else None, kwargs, self._s(meta),
                        self._s(target), self._s(method) if method else None)

    @v_args(meta=True)
    def flow(self, meta, children):
        inputs, call, *rest = children
        return ast.Flow(inputs, call, rest[0] if rest else (), self._s(meta))

    @v_args(meta=True)
    def sync(self, meta, children):
        source, target = children
        return ast.Sync(ast.FieldRef(str(source), self._s(source)),
                        ast.FieldRef(str(target), self._s(target)), self._s(meta))

    @v_args(meta=True)
    def step(self, meta, children):
        return ast.Step(tuple(children), self._s(meta))

    # ---- file
    @v_args(meta=True)
    def include(self, meta, children):
        (tok,) = children
        return ast.Include(_unescape(str(tok)), self._s(meta))

    @v_args(meta=True)
    def header(self, meta, children):
        return ast.Header(self.number(children), self._s(meta))

    def start(self, children):
        header = children[0] if children and isinstance(children[0], ast.Header) else None
        items = children[1:] if header else children
        return header, tuple(items)


# ---- friendly syntax errors ------------------------------------------------------
# Lark matches a real error against these small wrong specs by parser state, so
# the message names the mistake the user made rather than the tokens expected.
_EXAMPLES: dict[str, list[str]] = {
    "missing `=` between a key and its value": [
        "pool p { nodes 1 }", 'model m { path "x" }', "pool p { a = 1 nodes 1 }",
        "role r { optim { lr 1 } }",
    ],
    "use `=` to set a key, not `:`": ["pool p { nodes: 1 }", "role r { optim { lr: 1 } }"],
    "a key needs a value after `=`": ["pool p { nodes = }", "role r { optim { lr = } }"],
    "a `{` is never closed: add the matching `}`": [
        'model m { path = "x"', "step { a -> b -> c", "role r { optim { lr = 1 }",
        "pool p {",
    ],
    "a block is written `kind name { key = value ... }`": [
        "model m path = 1", "model = 1", 'model m "x"', "model m n o {",
    ],
    "a dataflow line reads `inputs -> call -> outputs`": [
        "step { a -> -> b }", "step { -> a -> b }", "step { a, -> b }", "step { a b -> c }",
        "step { a -> b -> }", "step { a -> b. }", "step { a = b }",
        "step { a -> b -> c  -> d -> e }",
    ],
    "a list is written `[a, b, c]`": ["x { k = [1 2] }", "x { k = [, 1] }", "x { k = [1,, 2] }"],
    "keyword arguments are written `name = value`, separated by commas": [
        "step { a -> f(x) -> b }", "step { a -> f(x = 1 y = 2) -> b }", "step { a -> f(x = ) -> b }",
    ],
    "a string is written in double quotes on one line": ["model m { path = 'x' }", 'model m { path = "x }'],
    "`sync` is written `sync actor -> rollout`": ["step { sync a b }", "step { sync -> b }", "step { sync a -> }"],
    "the header is written `rlgraph 1` on the first line": ["rlgraph\nmodel m {}", "rlgraph x"],
    "unexpected `}`: it closes no block": ["}", "model m { } }", "model m { a = 1 } }", "step { a -> b -> c } }"],
}


# A character that starts no token at all: the mistake it usually is, and how to fix it.
_BAD_CHARACTERS = {
    ":": ("use `=` to set a key, not `:`", "write `key = value`"),
    '"': ("this string is never closed", 'a string ends with `"` on the same line'),
    "'": ("a string is written in double quotes on one line", 'write `"text"`'),
}


@lru_cache(maxsize=None)
def _example_states() -> tuple[tuple[object, frozenset, str, str], ...]:
    """(parser state, accepted tokens, unexpected token type, label) of every example's error.

    Only the state on top of the stack is compared, not the stack's depth (as
    lark's match_examples does), so an example matches the same mistake after a
    header, after other items, or deeper in nested blocks.
    """
    found = []
    for label, examples in _EXAMPLES.items():
        for text in examples + ["rlgraph 1\n" + e for e in examples]:
            try:
                _lark().parse(text, start="start")
            except UnexpectedToken as ut:
                found.append((ut.state.position, frozenset(ut.accepts or ()), ut.token.type, label))
            except UnexpectedInput:
                pass
    return tuple(found)


def _friendly(exc: UnexpectedInput) -> str | None:
    if not isinstance(exc, UnexpectedToken) or exc.state is None:
        return None
    key = exc.state.position, frozenset(exc.accepts or ())
    same_state = [(token, label) for position, accepts, token, label in _example_states() if (position, accepts) == key]
    same_token = [label for token, label in same_state if token == exc.token.type]
    return (same_token or [label for _, label in same_state] or [None])[0]


_BRACKETS = re.compile(r'#[^\n]*|"(?:[^"\\\n]|\\.)*"|[{}\[\]()]')  # strings and comments are skipped whole


def _position(text: str, offset: int) -> tuple[int, int]:
    """A character offset -> 1-based (line, column), counted as Lark counts them."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _offset(text: str, line: int, column: int) -> int:
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
    return start + column - 1


def _open_brace(text: str, offset: int) -> int | None:
    """The offset of the innermost `{` still open before `offset` (strings and comments skipped), or None."""
    stack: list[int] = []
    for match in _BRACKETS.finditer(text, 0, offset):
        if match.group() == "{":
            stack.append(match.start())
        elif match.group() == "}" and stack:
            stack.pop()
    return stack[-1] if stack else None


_READABLE = {
    "LBRACE": "`{`", "RBRACE": "`}`", "EQUAL": "`=`", "NAME": "a name", "NUMBER": "a number",
    "STRING": "a string", "COMMA": "`,`", "LPAR": "`(`", "RPAR": "`)`", "LSQB": "`[`", "RSQB": "`]`",
    "DOT": "`.`", "__ANON_0": "`->`", "$END": "the end of the file",
}


def _expected(exc: UnexpectedInput) -> str:
    names = sorted(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or [])
    readable = sorted({_READABLE.get(n, f"`{n.lower()}`" if n.isupper() else n) for n in names})
    return ", ".join(readable[:8])


_UNCLOSED = "a `{` is never closed: add the matching `}`"
_TOP_LEVEL_LINE = re.compile(r"^(?:%s)\b" % "|".join(("step", "include", *BLOCKS)), re.MULTILINE)


def _unclosed_brace(text: str, offset: int, at_end: bool) -> tuple[int, int] | None:
    """(brace, noticed): an unclosed `{` that explains an error at `offset`, and where it shows.

    A top-level keyword at the start of a line while a block is still open means
    that block lacks its `}`; at the end of the file, any open block does.
    """
    for match in _TOP_LEVEL_LINE.finditer(text, 0, offset + 1):
        brace = _open_brace(text, match.start())
        if brace is not None:
            return brace, match.start()
    brace = _open_brace(text, offset) if at_end else None
    return None if brace is None else (brace, offset)


def _syntax_diagnostic(exc: UnexpectedInput, file: str, text: str) -> Diagnostic:
    at_end = isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END")
    if at_end:
        offset = len(text.rstrip())  # just after the last token, not on trailing blank lines
        line, column = _position(text, offset)
        found, width = "the end of the file", 1
    else:
        line, column = max(exc.line or 1, 1), max(exc.column or 1, 1)
        offset = _offset(text, line, column)
        if isinstance(exc, UnexpectedCharacters):
            found, width = f"`{exc.char}`", 1
        else:
            found, width = f"`{exc.token}`", max(len(str(exc.token)), 1)
    span = Span(file, line, column, line, column + width)
    unclosed = _unclosed_brace(text, offset, at_end)
    if unclosed is not None:
        brace, noticed = unclosed
        (b_line, b_col), (n_line, n_col) = _position(text, brace), _position(text, noticed)
        where = "the file ends" if at_end and noticed == offset else "the next block starts"
        return error("syntax", _UNCLOSED, Span(file, b_line, b_col, b_line, b_col + 1), label="never closed",
                     notes=[(f"still open when {where}", Span(file, n_line, n_col, n_line, n_col + 1))])
    if isinstance(exc, UnexpectedCharacters) and exc.char in _BAD_CHARACTERS:
        message, hint = _BAD_CHARACTERS[exc.char]
        return error("syntax", message, span, hint, label=f"unexpected {found}")
    friendly = _friendly(exc)
    expected = _expected(exc)
    message = friendly or f"unexpected {found}"
    hints = [f"expected {expected}" if expected else ""]
    return error("syntax", message, span, *hints, label=f"unexpected {found}" if friendly else "")


# ---- entry points ---------------------------------------------------------------


def decode(data: bytes, file: str) -> tuple[str | None, Diagnostic | None]:
    """Bytes -> text, or a diagnostic that points at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8", errors="replace")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        span = Span(file, line, column, line, column + 1)
        return None, error("encoding", f"byte 0x{data[exc.start]:02x} is not valid UTF-8", span,
                           "save the spec as UTF-8 text")


# Blocks, lists and argument lists nest at most this deep. The schema needs two
# levels; the limit keeps every recursive walk of the tree far from Python's
# recursion limit, so a hostile spec gets a diagnostic, not a traceback.
MAX_NESTING = 32


class NestingTooDeep(UnexpectedInput):
    def __init__(self, text: str, offset: int):
        self.line, self.column = _position(text, offset)
        self.pos_in_stream = offset

    def __str__(self) -> str:
        return f"nested more than {MAX_NESTING} levels deep"


def _check_nesting(text: str) -> None:
    depth = 0
    for match in _BRACKETS.finditer(text):
        char = match.group()
        if char in "{[(":
            depth += 1
            if depth > MAX_NESTING:
                raise NestingTooDeep(text, match.start())
        elif char in "}])":
            depth = max(depth - 1, 0)


def parse_text(text: str, file: str) -> tuple[ast.SpecFile | None, list[Diagnostic]]:
    """Parse one file's text. On a syntax error, returns (None, [diagnostic])."""
    if "\x00" in text:
        index = text.index("\x00")
        line = text.count("\n", 0, index) + 1
        column = index - (text.rfind("\n", 0, index) + 1) + 1
        return None, [error("encoding", "the file contains a NUL byte", Span(file, line, column, line, column + 1),
                            "a spec is plain text; is this a binary file?")]
    try:
        _check_nesting(text)
    except NestingTooDeep as exc:
        return None, [error("syntax", f"blocks and lists are {exc}", Span(file, exc.line, exc.column, exc.line,
                            exc.column + 1), "a spec needs two levels at most, e.g. `role actor { optim { ... } }`")]
    _CommentSink.tokens = []
    try:
        tree = _lark().parse(text, start="start")
    except UnexpectedInput as exc:
        return None, [_syntax_diagnostic(exc, file, text)]
    try:
        header, items = _transform(tree, file)
    except LiteralTooLong as exc:
        tok = exc.token
        return None, [error("syntax", str(exc), _span(file, tok), "no setting takes a number this large: "
                            "write the value it should have", label="integer literal too long")]
    comments = tuple(ast.Comment(str(t), _span(file, t)) for t in _CommentSink.tokens)
    return ast.SpecFile(file, header, items, comments), []


def parse_value(text: str, file: str) -> ast.Value:
    """One value, as written on the right of `=`. Raises lark's UnexpectedInput."""
    _check_nesting(text)
    return _transform(_lark().parse(text, start="value"), file)


def _transform(tree, file: str):
    """The AST of a parse tree; a LiteralTooLong comes out as itself, not wrapped in lark's VisitError."""
    try:
        return _ToAst(file).transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, LiteralTooLong):
            raise exc.orig_exc from None
        raise
