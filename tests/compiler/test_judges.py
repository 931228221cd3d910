"""The judges pass (rlgraph/compiler/passes/judges.py): a judge's template compiles over a sample's fields and its
parser is written as one; each error points at the spec (an inline template) or at the template file's line."""

from __future__ import annotations

import pytest

from rlgraph.diagnostics.render import render_full
from rlgraph.plan.build import plan_spec

from .helpers import compile_text, found, line_of, only, spec

STEP = """\
  prompts -> rollout.generate -> responses
  responses -> judge.score -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update"""


def judged(template: str = '"{{ prompt }}{{ response }} Right? yes or no:"', parser: str = '"yes_no"') -> str:
    roles = ("role actor { model = policy  pool = main }\nrole rollout { colocate = actor  n = 4 }\n"
             f"role judge {{ kind = judge  model = policy  colocate = actor  template = {template}  "
             f"parser = {parser} }}")
    return spec(STEP, roles=roles, devices=1)


def test_a_judge_with_a_good_template_and_parser_checks_and_plans(tmp_path):
    compilation = compile_text(tmp_path, judged())
    assert found(compilation) == []
    plan, diagnostics = plan_spec(compilation)
    assert plan.ok and diagnostics == []
    judge = next(r for r in plan.roles if r.name == "judge")
    assert judge.settings.template == "{{ prompt }}{{ response }} Right? yes or no:"
    assert (judge.settings.parser, judge.settings.base_dir) == ("yes_no", str(tmp_path))


def test_an_inline_templates_unknown_field_is_an_error_at_the_template_with_the_fields(tmp_path):
    text = judged('"{{ prompt }} = {{ answer }}?"')
    d = only(compile_text(tmp_path, text), "judge-template")
    line = line_of(text, "kind = judge")
    assert (d.span.line, d.span.column) == (line, text.splitlines()[line - 1].index('"{{ prompt') + 1)
    assert "reads `answer`, which a sample does not have" in d.message
    assert "{{ response }}" in d.hints[0] and "{{ ground_truth }}" in d.hints[0]


def test_an_inline_templates_syntax_error_names_its_line_within_the_template(tmp_path):
    text = judged(r'"{{ prompt }}\n{{ response }\nRight?"')
    d = only(compile_text(tmp_path, text), "judge-template")
    assert d.span.line == line_of(text, "kind = judge")
    assert "does not parse" in d.message and "(line 2 of the template)" in d.message


@pytest.mark.parametrize("body, line, words", [
    ("Question: {{ prompt }}\nAnswer: {{ responce }}\nRight?\n", 2, "reads `responce`"),
    ("Question: {{ prompt }}\n\nAnswer: {{ response }\nRight?\n", 3, "does not parse"),
])
def test_a_template_files_error_points_at_its_line_in_that_file(tmp_path, body, line, words):
    (tmp_path / "judge.jinja").write_text(body)
    text = judged('"judge.jinja"')
    result = compile_text(tmp_path, text)
    d = only(result, "judge-template")
    assert (d.span.file, d.span.line) == (str(tmp_path / "judge.jinja"), line)
    assert words in d.message
    assert d.notes[0][1].line == line_of(text, "kind = judge")  # and where the spec names the file
    shown = render_full([d], result.sources)  # the file's line is quoted, as a spec's is
    assert f"{line} | {body.splitlines()[line - 1]}" in shown


def test_a_template_file_that_cannot_be_read_is_an_error_not_a_traceback(tmp_path):
    result = compile_text(tmp_path, judged('"missing.jinja"'))
    d = only(result, "judge-template")
    assert "`missing.jinja` cannot be read" in d.message and str(tmp_path) in d.hints[0]
    plan, _ = plan_spec(result)  # planning does not read the template it was told is broken
    assert not plan.ok


def test_a_good_template_file_is_read_into_the_plan(tmp_path):
    (tmp_path / "judge.jinja").write_text("Q: {{ prompt }}\nA: {{ response }}\n")
    plan, diagnostics = plan_spec(compile_text(tmp_path, judged('"judge.jinja"')))
    assert plan.ok, diagnostics
    assert next(r for r in plan.roles if r.name == "judge").settings.template == "Q: {{ prompt }}\nA: {{ response }}\n"


@pytest.mark.parametrize("parser", ['"tag:"', '"yesno"', '"parsers.py:"'])
def test_a_bad_parser_string_is_an_error_at_the_parser_with_the_forms(tmp_path, parser):
    text = judged(parser=parser)
    d = only(compile_text(tmp_path, text), "judge-parser")
    row = text.splitlines()[d.span.line - 1]
    assert row[d.span.column - 1:].startswith(parser)
    assert '"yes_no"' in d.hints[0] and '"tag:score"' in d.hints[0] and "(verdict, prompt, response, ground_truth)" \
        in d.hints[0]


def test_check_knows_a_judges_batch_arithmetic_its_replicas_split_the_steps_samples(tmp_path):
    """judge.score splits the step's samples (prompts x n) over the judge's replicas, as any forward pass."""
    text = judged().replace("colocate = actor  template", "pool = judging  replicas = 3  template") + \
        "pool judging { nodes = 1  devices_per_node = 3 }\n"
    d = only(compile_text(tmp_path, text), "batch-divisibility")
    assert "32 prompts × n=4 = 128 samples per step do not split evenly over the 3 data-parallel replicas of " \
           "`judge`" in d.message
    assert found(compile_text(tmp_path, text.replace("replicas = 3", "replicas = 2"))) == []
