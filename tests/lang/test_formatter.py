"""rlgraph/lang/formatter.py: canonical form, every comment kept, idempotent, meaning unchanged."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from rlgraph.lang.formatter import WIDTH, FormatError, format_text, without_spans
from rlgraph.lang.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted(ROOT.glob("specs/**/*.rl"))
GOLDEN = sorted(p for p in ROOT.glob("tests/golden/**/*.rl") if not p.name.startswith("syntax_"))


def fmt(text: str) -> str:
    return format_text(dedent(text).lstrip("\n"), "t.rl")


def same_meaning(a: str, b: str) -> bool:
    before, after = parse_text(a, "a")[0], parse_text(b, "b")[0]
    return without_spans(before) == without_spans(after) and \
        sorted(c.text.rstrip() for c in before.comments) == sorted(c.text.rstrip() for c in after.comments)


# ---- the shipped specs ---------------------------------------------------------------


@pytest.mark.parametrize("path", SPECS + GOLDEN, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_specs_are_formatted(path):
    text = path.read_text()
    assert format_text(text, str(path)) == text


@pytest.mark.parametrize("path", SPECS, ids=lambda p: str(p.relative_to(ROOT)))
def test_formatting_a_messy_spec_keeps_its_meaning(path):
    """Squash every spec onto as few lines as the grammar allows, then format it back."""
    text = path.read_text()
    spec, _ = parse_text(text, "x")
    lines = text.splitlines()
    messy = []
    for number, line in enumerate(lines, 1):
        code = line.split("#", 1)[0] if not any(c.span.line == number for c in spec.comments) else line
        messy.append(("   " + code.replace(" = ", "=").replace(" -> ", "->")).rstrip())
    messy_text = "\n\n\n".join(messy)
    formatted = format_text(messy_text, "x")
    assert same_meaning(messy_text, formatted)
    assert format_text(formatted, "x") == formatted


# ---- the rules -------------------------------------------------------------------------


def test_canonical_spacing_and_indentation():
    out = fmt('''
        rlgraph   1
        model policy{path="x"   params=7B}
        role actor {
              model=policy
            optim{lr=1e-4 betas=[0.9,0.95,]}
        }
        step{ sync actor->rollout
        a,b->f(k=1,j=x)->c,d
        a -> g() -> e }
    ''')
    assert out == dedent('''\
        rlgraph 1

        model policy { path = "x"  params = 7B }

        role actor {
          model = policy
          optim { lr = 1e-4  betas = [0.9, 0.95] }
        }

        step {
          sync actor -> rollout
          a, b -> f(k = 1, j = x) -> c, d
          a -> g -> e
        }
    ''')


def test_numbers_and_strings_as_written():
    out = fmt(r'''
        rlgraph 1
        x { a = 1e-4  b = 1.0  c = .5  d = 80GiB  e = "tab\t\"q\""  f = +3  g = 1E+06 }
    ''')
    assert r'a = 1e-4  b = 1.0  c = .5  d = 80GiB  e = "tab\t\"q\""  f = +3  g = 1E+06' in out


def test_one_line_blocks_stay_when_short_and_flat():
    out = fmt('''
        rlgraph 1
        pool main { nodes = 1  devices_per_node = 1 }
        role actor { model = policy  optim { lr = 1 } }
        data {
          train = "x"
        }
    ''')
    assert "pool main { nodes = 1  devices_per_node = 1 }" in out  # flat, fits: stays
    assert "role actor {\n  model = policy\n  optim { lr = 1 }\n}" in out  # a nested block: expanded
    assert 'data {\n  train = "x"\n}' in out  # was multi-line: stays multi-line


def test_a_long_one_line_block_is_expanded():
    entries = "  ".join(f"key{i} = {i}" for i in range(20))
    out = fmt(f"rlgraph 1\nx {{ {entries} }}\n")
    assert all(len(line) <= WIDTH for line in out.splitlines())
    assert out.count("\n") == 2 + 20 + 2


def test_empty_blocks():
    assert fmt("rlgraph 1\ndata {\n\n}\nstep { }\n") == "rlgraph 1\n\ndata {}\n\nstep {}\n"


def test_blank_lines():
    out = fmt('''


        rlgraph 1
        model a {}
        model b {}



        role actor {

          model = a


          pool = main

        }
        step {
          a -> f -> b

          b -> g -> c
          c -> h -> d
        }


    ''')
    assert out == dedent('''\
        rlgraph 1

        model a {}

        model b {}

        role actor {
          model = a

          pool = main
        }

        step {
          a -> f -> b

          b -> g -> c
          c -> h -> d
        }
    ''')


def test_comments_are_kept_in_place():
    src = dedent('''\
        # before the header
        rlgraph 1  # the version
        # right under the header: the file's description

        # about the model
        model policy { path = "x" }  # at the end of a line
        # about the actor, no blank line before it
        role actor {  # after the brace
          # about the key
          model = policy  # trailing

          # dangling at the end of the block
        }
        step {
          # first
          a -> f -> b  # trailing in a step
        }
        # at the end of the file
    ''')
    out = format_text(src, "t.rl")
    assert out == dedent('''\
        # before the header
        rlgraph 1  # the version
        # right under the header: the file's description

        # about the model
        model policy { path = "x" }  # at the end of a line

        # about the actor, no blank line before it
        role actor {  # after the brace
          # about the key
          model = policy  # trailing

          # dangling at the end of the block
        }

        step {
          # first
          a -> f -> b  # trailing in a step
        }

        # at the end of the file
    ''')
    assert same_meaning(src, out)


def test_a_comment_inside_a_joined_statement_moves_before_it():
    out = fmt('''
        rlgraph 1
        step {
          a, b -> f(k = 1,  # why k is 1
                    j = [1,  # the first
                         2]) -> c
        }
        x {
          betas = [0.9,  # momentum
                   0.95]  # second moment
        }
    ''')
    assert out == dedent('''\
        rlgraph 1

        step {
          # why k is 1
          # the first
          a, b -> f(k = 1, j = [1, 2]) -> c
        }

        x {
          # momentum
          betas = [0.9, 0.95]  # second moment
        }
    ''')


def test_comments_between_a_name_and_its_brace():
    out = fmt('''
        rlgraph 1
        model policy  # the policy
        {
          path = "x"
        }
    ''')
    assert out == 'rlgraph 1\n\n# the policy\nmodel policy {\n  path = "x"\n}\n'


def test_crlf_and_tabs():
    out = format_text('rlgraph 1\r\nmodel m {\r\n\tpath = "x"  # c\r\n}\r\n', "t.rl")
    assert out == 'rlgraph 1\n\nmodel m {\n  path = "x"  # c\n}\n'


def test_includes_keep_their_string():
    out = fmt('rlgraph 1\ninclude   "common/a b.rl"\ninclude "x\\"y.rl"\n')
    assert out == 'rlgraph 1\n\ninclude "common/a b.rl"\n\ninclude "x\\"y.rl"\n'


def test_empty_and_comment_only_files():
    assert format_text("", "t.rl") == ""
    assert format_text("\n\n  \n", "t.rl") == ""
    assert format_text("# only a comment\n\n\n# another", "t.rl") == "# only a comment\n\n# another\n"


def test_a_file_without_header_is_formatted_too():
    assert fmt("model m {path=\"x\"}") == 'model m { path = "x" }\n'


def test_syntax_errors_raise_with_diagnostics():
    with pytest.raises(FormatError) as exc:
        format_text("rlgraph 1\npool p { nodes: 1 }\n", "t.rl")
    (diagnostic,) = exc.value.diagnostics
    assert diagnostic.code == "syntax" and diagnostic.span.line == 2
    with pytest.raises(FormatError):
        format_text("rlgraph 1\x00", "t.rl")


def test_idempotent_on_the_rule_cases():
    for text in [
        "rlgraph 1\n# a\n\n\n# b\nmodel m {} # c\n",
        "rlgraph 1\nx { a = [ 1 , 2 ] }\ny {\n  # only a comment\n}\n",
        "rlgraph 1\nstep {\n\n  # c\n\n  a -> b -> c\n\n}\n",
    ]:
        once = format_text(text, "t.rl")
        assert format_text(once, "t.rl") == once
        assert same_meaning(text, once)
