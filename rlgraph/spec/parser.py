"""Text -> SpecFile. Lark (LALR) with positions; syntax errors become Diagnostics."""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from lark import Lark, Token, Transformer, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, v_args

from rlgraph.diagnostics import Diagnostic, Span, error
from rlgraph.spec import ast

_UNIT = re.compile(r"([KMGTP]i?B|[KMBT])$")


@lru_cache(maxsize=None)
def _lark() -> Lark:
    text = resources.files("rlgraph.grammar").joinpath("rlgraph.lark").read_text()
    # `value` is a second start symbol so that `-s key=value` overrides parse with the same rules.
    return Lark(text, parser="lalr", start=["start", "value"], propagate_positions=True,
                maybe_placeholders=False, lexer_callbacks={"COMMENT": _CommentSink.add})


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


class _ToAst(Transformer):
    def __init__(self, file: str):
        super().__init__()
        self.file = file

    def _s(self, item) -> Span:
        return _span(self.file, item)

    # ---- values
    def number(self, children):
        (tok,) = children
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
    ],
    "a list is written `[a, b, c]`": ["x { k = [1 2] }", "x { k = [, 1] }", "x { k = [1,, 2] }"],
    "keyword arguments are written `name = value`, separated by commas": [
        "step { a -> f(x) -> b }", "step { a -> f(x = 1 y = 2) -> b }", "step { a -> f(x = ) -> b }",
    ],
    "a string is written in double quotes on one line": ["model m { path = 'x' }", 'model m { path = "x }'],
    "`sync` is written `sync actor -> rollout`": ["step { sync a b }", "step { sync -> b }", "step { sync a -> }"],
    "the header is written `rlgraph 1` on the first line": ["rlgraph\nmodel m {}", "rlgraph x"],
    "unexpected `}`: it closes no block": ["}", "model m { } }"],
}


def _friendly(exc: UnexpectedInput) -> str | None:
    try:
        return exc.match_examples(lambda text: _lark().parse(text, start="start"), _EXAMPLES, use_accepts=True)
    except Exception:  # matching is best effort; never let it hide the real error
        return None


_READABLE = {
    "LBRACE": "`{`", "RBRACE": "`}`", "EQUAL": "`=`", "NAME": "a name", "NUMBER": "a number",
    "STRING": "a string", "COMMA": "`,`", "LPAR": "`(`", "RPAR": "`)`", "LSQB": "`[`", "RSQB": "`]`",
    "DOT": "`.`", "__ANON_0": "`->`", "$END": "the end of the file",
}


def _expected(exc: UnexpectedInput) -> str:
    names = sorted(getattr(exc, "expected", None) or getattr(exc, "allowed", None) or [])
    readable = sorted({_READABLE.get(n, f"`{n.lower()}`" if n.isupper() else n) for n in names})
    return ", ".join(readable[:8])


def _syntax_diagnostic(exc: UnexpectedInput, file: str, text: str) -> Diagnostic:
    if isinstance(exc, UnexpectedEOF):
        lines = text.splitlines() or [""]
        line, column = len(lines), len(lines[-1]) + 1
        found = "the end of the file"
    else:
        line, column = exc.line, exc.column
        if isinstance(exc, UnexpectedCharacters):
            found = f"`{exc.char}`"
        else:
            found = f"`{exc.token}`" if str(exc.token) else "the end of the file"
    width = len(str(getattr(exc, "token", "") or "")) if not isinstance(exc, UnexpectedCharacters) else 1
    if line is None or line < 1:
        line, column = 1, 1
    span = Span(file, line, column, line, column + max(width, 1))
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


def parse_text(text: str, file: str) -> tuple[ast.SpecFile | None, list[Diagnostic]]:
    """Parse one file's text. On a syntax error, returns (None, [diagnostic])."""
    if "\x00" in text:
        index = text.index("\x00")
        line = text.count("\n", 0, index) + 1
        column = index - (text.rfind("\n", 0, index) + 1) + 1
        return None, [error("encoding", "the file contains a NUL byte", Span(file, line, column, line, column + 1),
                            "a spec is plain text; is this a binary file?")]
    _CommentSink.tokens = []
    try:
        tree = _lark().parse(text, start="start")
    except UnexpectedInput as exc:
        return None, [_syntax_diagnostic(exc, file, text)]
    header, items = _ToAst(file).transform(tree)
    comments = tuple(ast.Comment(str(t), _span(file, t)) for t in _CommentSink.tokens)
    return ast.SpecFile(file, header, items, comments), []


def parse_value(text: str, file: str) -> ast.Value:
    """One value, as written on the right of `=`. Raises lark's UnexpectedInput."""
    return _ToAst(file).transform(_lark().parse(text, start="value"))
