"""Transforms and losses declared in the spec: every call held to its declaration by `check`, which never
imports the function (the module named here does not exist), and planned like a built-in."""

import os
import sys

from rlgraph.contract.settings import UserFunctionSettings
from rlgraph.plan import build_plan
from rlgraph.plan.model import Plan
from rlgraph.plan.text import render_text

from .helpers import GRPO_STEP, compile_text, found, line_of, only, spec

TRANSFORM = """\
transform loo {
  fn = "no_such_module:leave_one_out"
  inputs = [scores]
  outputs = [advantages]
  args { baseline = 0.5  centred = true }
}"""
LOSS = 'loss my_loss { fn = "no_such_file.py:clipped"  args { beta = 0.1 } }'
USER_STEP = GRPO_STEP.replace("scores -> grpo_advantage -> advantages", "scores -> loo -> advantages")


def test_a_declared_transform_and_loss_check_without_importing_anything(tmp_path):
    step = USER_STEP.replace("-> actor.update", "-> actor.update(policy_loss = my_loss)")
    result = compile_text(tmp_path, spec(step, extra=TRANSFORM + "\n" + LOSS))
    assert found(result) == []
    assert "no_such_module" not in sys.modules


def test_wrong_number_of_inputs_is_an_error_at_the_call_pointing_at_the_declaration(tmp_path):
    text = spec(USER_STEP.replace("scores -> loo", "scores, old_log_prob -> loo"), extra=TRANSFORM)
    d = only(compile_text(tmp_path, text), "bad-arguments")
    assert d.span.line == line_of(text, "-> loo ->")
    assert d.message == "`loo` takes 1 input field, got 2"
    assert d.hints == ("write it as `scores -> loo -> advantages`",)
    assert [(note, span.line) for note, span in d.notes] == [("`loo` is declared here", line_of(text, "transform loo"))]


def test_wrong_number_of_outputs_is_an_error_at_the_call(tmp_path):
    text = spec(USER_STEP.replace("-> loo -> advantages", "-> loo -> advantages, returns"), extra=TRANSFORM)
    d = only(compile_text(tmp_path, text), "bad-arguments")
    assert (d.span.line, d.message) == (line_of(text, "-> loo ->"), "`loo` produces 1 field, but 2 are named")


def test_an_undeclared_argument_is_an_error_and_a_declared_one_keeps_its_type(tmp_path):
    text = spec(USER_STEP.replace("-> loo ->", "-> loo(baseline = true, beta = 2) ->"), extra=TRANSFORM)
    result = compile_text(tmp_path, text)
    assert found(result) == [("unknown-key", line_of(text, "beta = 2")), ("wrong-type", line_of(text, "beta = 2"))]
    assert only(result, "unknown-key").message == "`loo` takes no argument `beta`"
    assert only(result, "unknown-key").hints[-1] == "allowed: `baseline`, `centred`"
    assert "expected a number, as declared (default 0.5)" in only(result, "wrong-type").message


def test_an_undeclared_loss_is_an_error_that_names_the_declared_ones(tmp_path):
    text = spec(GRPO_STEP.replace("-> actor.update", "-> actor.update(policy_loss = my_los)"), extra=LOSS)
    d = only(compile_text(tmp_path, text), "wrong-type")
    assert d.message.endswith("expected one of `vanilla`, `gspo`, `cispo` or a declared loss: `my_loss`")
    assert d.label == "did you mean `my_loss`?"


def test_a_loss_called_as_a_transform_says_where_it_goes(tmp_path):
    text = spec(GRPO_STEP.replace("scores -> grpo_advantage", "scores -> my_loss"), extra=LOSS)
    d = only(compile_text(tmp_path, text), "unknown-call")
    assert d.hints == ("pass it to the update: `actor.update(policy_loss = my_loss)`",)


def test_a_built_in_name_and_an_argument_the_function_gets_anyway_are_errors(tmp_path):
    extra = ('transform gae { fn = "m:f"  inputs = [scores]  outputs = [x]  args { index = 1 } }\n'
             'loss cispo { fn = "m:g"  args { clip_low = 0.1 } }')
    step = GRPO_STEP + "\n  scores -> gae -> x\n  x, advantages -> actor.update(policy_loss = cispo)"
    result = compile_text(tmp_path, spec(step, extra=extra))
    codes = [(d.code, d.message) for d in result.diagnostics if d.code == "duplicate-name"]
    assert codes == [
        ("duplicate-name", "`gae` is a built-in transform: a declared transform needs a name of its own"),
        ("duplicate-name", "argument `index` of transform `gae` has a name the function is already called with"),
        ("duplicate-name", "`cispo` is a built-in policy loss: a declared loss needs a name of its own"),
        ("duplicate-name", "argument `clip_low` of loss `cispo` has a name the function is already called with"),
    ]


def test_unused_declarations_are_warnings(tmp_path):
    text = spec(GRPO_STEP, extra=TRANSFORM + "\n" + LOSS)
    assert found(compile_text(tmp_path, text)) == [("unused-function", line_of(text, "transform loo")),
                                                  ("unused-function", line_of(text, "loss my_loss"))]


def test_a_user_estimator_feeds_the_update_only_with_advantages_as_its_first_output(tmp_path):
    text = spec(USER_STEP, extra=TRANSFORM.replace("outputs = [advantages]", "outputs = [adv]"))
    d = only(compile_text(tmp_path, text), "algorithm")
    assert "declared with `outputs = [advantages, ...]`" in d.hints[0]


def test_the_plan_resolves_a_call_s_arguments_over_the_declared_ones_and_reads_back(tmp_path):
    step = USER_STEP.replace("-> loo ->", "-> loo(baseline = 0.7) ->").replace(
        "-> actor.update", "-> actor.update(policy_loss = my_loss)")
    text = spec(step, extra=TRANSFORM + "\n" + LOSS)
    plan = build_plan(compile_text(tmp_path, text))
    folder = os.path.realpath(tmp_path)
    assert plan.call("loo").settings == UserFunctionSettings(
        "loo", "no_such_module:leave_one_out", folder, f"{tmp_path / 'spec.rl'}:{line_of(text, 'transform loo')}",
        ("scores",), ("advantages",), {"baseline": 0.7, "centred": True})
    update = plan.call("actor.update").settings
    assert (update.policy_loss, update.user_loss.fn, update.user_loss.args) == ("my_loss", "no_such_file.py:clipped",
                                                                               {"beta": 0.1})
    again = Plan.from_json(plan.to_json())
    assert again.call("loo").settings == plan.call("loo").settings
    assert again.call("actor.update").settings == update
    assert "loo [driver]" in render_text(plan, color=False, width=160)  # scheduled on the driver like a built-in transform
