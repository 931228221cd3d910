"""rlgraph/lang/parser.py: the syntax tree with spans, comments, and friendly syntax errors."""

from __future__ import annotations

import pytest

from rlgraph.lang import ast
from rlgraph.lang.parser import decode, parse_number, parse_text


def parse(text: str) -> ast.SpecFile:
    spec, diagnostics = parse_text(text, "t.rl")
    assert not diagnostics, diagnostics
    return spec


def syntax_error(text: str):
    spec, diagnostics = parse_text(text, "t.rl")
    assert spec is None
    (diagnostic,) = diagnostics
    assert diagnostic.code == "syntax" or diagnostic.code == "encoding"
    return diagnostic


def test_blocks_values_and_spans():
    spec = parse('rlgraph 1\nmodel policy {\n  path = "x"\n  params = 7B\n  tags = [a, 1, true]\n}\n')
    assert spec.header.version.value == 1
    (block,) = spec.items
    assert (block.keyword, block.name) == ("model", "policy")
    path, params, tags = block.entries
    assert path.value == ast.String("x", path.value.span) and path.key_span.line == 3
    assert (params.value.value, params.value.unit, params.value.text) == (7, "B", "7B")
    assert [type(v).__name__ for v in tags.value.items] == ["Ident", "Number", "Bool"]
    assert (block.span.line, block.span.end_line, block.span.end_column) == (2, 6, 2)


def test_step_statements():
    spec = parse("rlgraph 1\nstep {\n  sync actor -> rollout\n  a, b -> actor.update(clip = 0.2) \n"
                 "  x -> gae -> y, z\n}")
    sync, update, gae = spec.items[0].statements
    assert (sync.source.name, sync.target.name) == ("actor", "rollout")
    assert update.call.label == "actor.update" and update.outputs == ()
    assert [k.key for k in update.call.kwargs] == ["clip"]
    assert gae.call.method is None and [f.name for f in gae.outputs] == ["y", "z"]


def test_comments_are_collected_with_positions():
    spec = parse("# a\nrlgraph 1  # b\nmodel m {\n  # c\n  path = \"#not a comment\"\n}\n# d")
    assert [(c.text, c.span.line, c.span.column) for c in spec.comments] == [
        ("# a", 1, 1), ("# b", 2, 12), ("# c", 4, 3), ("# d", 7, 1)]


def test_comments_do_not_leak_between_parses():
    parse("rlgraph 1 # one\n")
    assert [c.text for c in parse("rlgraph 1\n").comments] == []


@pytest.mark.parametrize("text, value, unit", [
    ("80GiB", 80, "GiB"), ("512MB", 512, "MB"), ("1e-6", 1e-6, None), ("7", 7, None), ("1.5B", 1.5, "B"),
    ("32K", 32, "K"), ("-3", -3, None), (".5", 0.5, None),
])
def test_numbers(text, value, unit):
    assert parse_number(text) == (value, unit)


@pytest.mark.parametrize("text, message", [
    ("rlgraph 1\npool p { nodes 1 }", "missing `=` between a key and its value"),
    ("rlgraph 1\nrole r {\n  optim { lr 1 }\n}", "missing `=` between a key and its value"),
    ("rlgraph 1\npool p { nodes: 1 }", "use `=` to set a key, not `:`"),
    ("rlgraph 1\npool p { nodes = }", "a key needs a value after `=`"),
    ("rlgraph 1\nmodel m path = 1", "a block is written `kind name { key = value ... }`"),
    ("rlgraph 1\nstep {\n  a -> b -> c\n  a -> -> b\n}", "a dataflow line reads `inputs -> call -> outputs`"),
    ("rlgraph 1\nstep {\n  a b -> c\n}", "a dataflow line reads `inputs -> call -> outputs`"),
    ("rlgraph 1\nx { k = [1 2] }", "a list is written `[a, b, c]`"),
    ("rlgraph 1\nstep {\n  a -> f(x) -> b\n}", "keyword arguments are written `name = value`, separated by commas"),
    ("rlgraph 1\nmodel m { path = 'x' }", "a string is written in double quotes on one line"),
    ('rlgraph 1\nmodel m { path = "x }', "this string is never closed"),
    ("rlgraph 1\nstep {\n  sync a b\n}", "`sync` is written `sync actor -> rollout`"),
    ("rlgraph x", "the header is written `rlgraph 1` on the first line"),
    ("rlgraph 1\nmodel m { }\n}", "unexpected `}`: it closes no block"),
])
def test_friendly_syntax_errors(text, message):
    assert syntax_error(text).message == message


def test_an_unclosed_brace_points_at_the_brace():
    at_end = syntax_error('rlgraph 1\nrole actor {\n  model = policy\n  optim { lr = 1 }\n')
    assert at_end.message.startswith("a `{` is never closed")
    assert (at_end.span.line, at_end.span.column) == (2, 12)
    assert at_end.notes[0][0] == "still open when the file ends"

    before_next = syntax_error('rlgraph 1\nmodel m {\n  path = "x"\n\npool p { nodes = 1 }\ndata { }\n')
    assert (before_next.span.line, before_next.span.column) == (2, 9)
    assert before_next.notes[0] == ("still open when the next block starts", before_next.notes[0][1])
    assert before_next.notes[0][1].line == 5


def test_braces_in_strings_and_comments_do_not_count():
    d = syntax_error('rlgraph 1\nmodel m { path = "{"  # {\n}\nrole r {\n')
    assert (d.span.line, d.span.column) == (4, 8)


def test_syntax_errors_always_have_a_position():
    for text in ["", "rlgraph", "{", "}", "\n\n\n}", "rlgraph 1\nmodel", "x { y = [", "step { a -> }"]:
        spec, diagnostics = parse_text(text, "t.rl")
        for d in diagnostics:
            assert d.span.line >= 1 and d.span.column >= 1


def test_nul_bytes_and_bad_utf8():
    d = syntax_error("rlgraph 1\nmodel m {\x00}")
    assert (d.code, d.span.line, d.span.column) == ("encoding", 2, 10)
    text, problem = decode(b"rlgraph 1\nmodel \xff", "t.rl")
    assert text is None and (problem.code, problem.span.line, problem.span.column) == ("encoding", 2, 7)
