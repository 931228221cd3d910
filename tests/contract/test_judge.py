"""A judge's template and its verdict parsers (rlgraph/contract/judge.py): what `check` compiles and the worker runs."""

from __future__ import annotations

import math

import pytest

from rlgraph.contract.judge import (TemplateProblem, as_verdict_score, builtin_parser, compile_template, parser_problem,
                                    render)


def test_a_template_renders_every_field_of_a_sample():
    template = compile_template("{{ data_source }}: {{ prompt }}{{ response }} (truth {{ ground_truth }}, "
                                "index {{ extra_info.index }})")
    text = render(template, prompt="12+34=", response="46", ground_truth="46", data_source="arith",
                  extra_info={"index": 7})
    assert text == "arith: 12+34=46 (truth 46, index 7)"


def test_a_field_a_sample_lacks_is_named_at_the_line_it_is_read_with_the_close_field():
    with pytest.raises(TemplateProblem) as problem:
        compile_template("Question: {{ prompt }}\nanswer follows\nAnswer: {{ responce }}\n")
    # line 2 has the word as text: the line is where the template reads it, not where the word first appears
    assert problem.value.line == 3
    assert "`responce`" in str(problem.value) and "did you mean `response`?" in str(problem.value)


def test_a_template_that_does_not_parse_says_jinja2s_reason_and_line():
    with pytest.raises(TemplateProblem) as problem:
        compile_template("{{ prompt }}\n{% if ground_truth %}\nIs it right?\n")
    assert "does not parse" in str(problem.value) and "endif" in str(problem.value)
    assert problem.value.line >= 2


def test_a_template_cannot_reach_pythons_internals():
    """A spec from someone else's repo renders sandboxed: attribute access to dunders is refused."""
    import jinja2

    template = compile_template("{{ prompt.__class__.__mro__ }}")
    with pytest.raises(jinja2.exceptions.SecurityError):
        render(template, prompt="x", response="", ground_truth=None)


@pytest.mark.parametrize("verdict, score", [
    ("yes", 1.0), ("Yes.", 1.0), ("  YES, it is", 1.0), ("no", 0.0), ("No!", 0.0),
    ("maybe", None), ("yesterday", None), ("", None), ("I think yes", None),
])
def test_yes_no_reads_the_verdicts_first_word(verdict, score):
    assert builtin_parser("yes_no")(verdict, "p", "r", "t") == score


@pytest.mark.parametrize("verdict, score", [
    ("<score>7</score>", 7.0), ("reasoning... <score> 0.25 </score>", 0.25), ("<score>-3</score>", -3.0),
    ("<score>1</score> then <score>9</score>", 9.0),  # the last one: a verdict may quote the format first
    ("<score>1e-2</score>", 0.01),
    ("<score>7", None),  # cut before its closing tag (max_new_tokens)
    ("<score>seven</score>", None), ("7", None), ("<grade>7</grade>", None),
])
def test_tag_reads_the_number_in_the_last_tag(verdict, score):
    assert builtin_parser("tag:score")(verdict, "p", "r", "t") == score


def test_a_user_function_is_not_a_builtin():
    assert builtin_parser("my_parsers.py:parse") is None and builtin_parser("pkg.mod:parse") is None


@pytest.mark.parametrize("value, score", [
    (1, 1.0), (0.5, 0.5), (True, 1.0), (False, 0.0), (None, None), (math.nan, None), (math.inf, None),
    ("1", None), ([1.0], None),
])
def test_only_a_finite_number_is_a_score(value, score):
    assert as_verdict_score(value) == score


@pytest.mark.parametrize("parser", ["yes_no", "tag:score", "tag:final_answer", "my_parsers.py:parse",
                                    "pkg.module:parse", "/abs/path/p.py:parse"])
def test_parsers_written_right(parser):
    assert parser_problem(parser) is None


@pytest.mark.parametrize("parser, words", [
    ("tag:", "names no tag"), ("tag:<score>", "names no tag"), ("yesno", "neither a built-in"),
    ("module:", "neither a built-in"), (":fn", "neither a built-in"), ("mod:not-a-name", "neither a built-in"),
])
def test_parsers_written_wrong_say_what_is_wrong(parser, words):
    assert words in parser_problem(parser)
